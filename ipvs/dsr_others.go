//go:build !linux

package ipvs

import (
	"net/netip"

	"github.com/switchyard-lb/switchyard/core/model"
)

// NFTDSR needs Linux.
type NFTDSR struct{}

var _ DSRFirewall = (*NFTDSR)(nil)

func (*NFTDSR) SetDSR(model.DSRPlan) error { return errUnsupported }

// NetlinkDSRTunnels needs Linux.
type NetlinkDSRTunnels struct{}

var _ DSRTunnels = (*NetlinkDSRTunnels)(nil)

// NewNetlinkDSRTunnels fails outside Linux.
func NewNetlinkDSRTunnels() (*NetlinkDSRTunnels, error) { return nil, errUnsupported }

func (*NetlinkDSRTunnels) Close() error                    { return nil }
func (*NetlinkDSRTunnels) EnsureFallback(netip.Addr) error { return errUnsupported }
func (*NetlinkDSRTunnels) EnsureGUE(uint16, bool) error {
	return errUnsupported
}

// ReadDSRRecord fails outside Linux.
func ReadDSRRecord() (bool, uint16, error) { return false, 0, errUnsupported }

// CloseGUEPort fails outside Linux.
func CloseGUEPort(uint16) (bool, error) { return false, errUnsupported }
