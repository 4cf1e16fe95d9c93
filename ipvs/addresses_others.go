//go:build !linux

package ipvs

import (
	"fmt"
	"net/netip"
	"runtime"
)

var errUnsupported = fmt.Errorf("ipvs: not supported on %s/%s", runtime.GOOS, runtime.GOARCH)

// NetlinkAddresses needs Linux.
type NetlinkAddresses struct{}

var _ Addresses = (*NetlinkAddresses)(nil)

// NewNetlinkAddresses fails outside Linux.
func NewNetlinkAddresses() (*NetlinkAddresses, error) { return nil, errUnsupported }

func (*NetlinkAddresses) Close() error                       { return errUnsupported }
func (*NetlinkAddresses) EnsureDummy(string) error           { return errUnsupported }
func (*NetlinkAddresses) Addrs(string) ([]netip.Addr, error) { return nil, errUnsupported }
func (*NetlinkAddresses) AddAddr(string, netip.Addr) error   { return errUnsupported }
func (*NetlinkAddresses) DelAddr(string, netip.Addr) error   { return errUnsupported }
