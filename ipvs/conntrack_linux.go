package ipvs

import (
	"fmt"
	"net/netip"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// NetlinkConntrack is Conntrack over ctnetlink (the nf_conntrack_netlink
// module), in the network namespace of the thread that created it.
type NetlinkConntrack struct {
	mu sync.Mutex
	h  *netlink.Handle
}

var _ Conntrack = (*NetlinkConntrack)(nil)

// NewNetlinkConntrack opens a netfilter-netlink handle.
func NewNetlinkConntrack() (*NetlinkConntrack, error) {
	h, err := netlink.NewHandle(unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("ipvs: open netfilter netlink: %w", err)
	}
	return &NetlinkConntrack{h: h}, nil
}

// Close releases the handle.
func (c *NetlinkConntrack) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.h.Close()
	return nil
}

func (c *NetlinkConntrack) DeleteUDP(vip netip.Addr, port uint16, backend netip.Addr) (uint, error) {
	f := &netlink.ConntrackFilter{}
	err := f.AddProtocol(unix.IPPROTO_UDP)
	if err == nil {
		err = f.AddIP(netlink.ConntrackOrigDstIP, vip.AsSlice())
	}
	if err == nil {
		err = f.AddPort(netlink.ConntrackOrigDstPort, port)
	}
	if err == nil && backend.IsValid() {
		err = f.AddIP(netlink.ConntrackReplySrcIP, backend.AsSlice())
	}
	if err != nil {
		return 0, fmt.Errorf("ipvs: conntrack filter for udp %s: %w", netip.AddrPortFrom(vip, port), err)
	}
	fam := netlink.InetFamily(unix.AF_INET)
	if vip.Is6() {
		fam = unix.AF_INET6
	}
	// The library dumps the whole table and deletes the matching entries
	// one by one; an interrupted dump still deletes what it matched, and
	// returns ErrDumpInterrupted with the count.
	c.mu.Lock()
	n, err := c.h.ConntrackDeleteFilters(netlink.ConntrackTable, fam, f)
	c.mu.Unlock()
	if err != nil {
		return n, fmt.Errorf("ipvs: delete udp conntrack entries to %s (backend %v): %w", netip.AddrPortFrom(vip, port), backend, dumpErr(err))
	}
	return n, nil
}
