//go:build !linux

package ipvs

import "net/netip"

// NetlinkConntrack needs Linux.
type NetlinkConntrack struct{}

var _ Conntrack = (*NetlinkConntrack)(nil)

// NewNetlinkConntrack fails outside Linux.
func NewNetlinkConntrack() (*NetlinkConntrack, error) { return nil, errUnsupported }

func (*NetlinkConntrack) Close() error { return errUnsupported }
func (*NetlinkConntrack) DeleteUDP(netip.Addr, uint16, netip.Addr) (uint, error) {
	return 0, errUnsupported
}
