//go:build !linux

package ipvs

// NetlinkConntrack needs Linux.
type NetlinkConntrack struct{}

var _ Conntrack = (*NetlinkConntrack)(nil)

// NewNetlinkConntrack fails outside Linux.
func NewNetlinkConntrack() (*NetlinkConntrack, error) { return nil, errUnsupported }

func (*NetlinkConntrack) Close() error { return errUnsupported }
func (*NetlinkConntrack) DeleteUDP([]UDPFlows) (uint, error) {
	return 0, errUnsupported
}
