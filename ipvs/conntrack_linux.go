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

func (c *NetlinkConntrack) DeleteUDP(flows []UDPFlows) (uint, error) {
	byFamily := map[netlink.InetFamily][]netlink.CustomConntrackFilter{}
	for _, fl := range flows {
		f := &netlink.ConntrackFilter{}
		err := f.AddProtocol(unix.IPPROTO_UDP)
		if err == nil {
			err = f.AddIP(netlink.ConntrackOrigDstIP, fl.VIP.AsSlice())
		}
		if err == nil {
			err = f.AddPort(netlink.ConntrackOrigDstPort, fl.Port)
		}
		if err == nil && fl.Backend.IsValid() {
			err = f.AddIP(netlink.ConntrackReplySrcIP, fl.Backend.AsSlice())
		}
		if err != nil {
			return 0, fmt.Errorf("ipvs: conntrack filter for udp %s: %w", netip.AddrPortFrom(fl.VIP, fl.Port), err)
		}
		fam := netlink.InetFamily(unix.AF_INET)
		if fl.VIP.Is6() {
			fam = unix.AF_INET6
		}
		byFamily[fam] = append(byFamily[fam], f)
	}
	// The library dumps the whole table and deletes the entries that
	// match any filter one by one; an interrupted dump still deletes what
	// it matched, and returns ErrDumpInterrupted with the count.
	var total uint
	for _, fam := range []netlink.InetFamily{unix.AF_INET, unix.AF_INET6} {
		filters := byFamily[fam]
		if len(filters) == 0 {
			continue
		}
		c.mu.Lock()
		n, err := c.h.ConntrackDeleteFilters(netlink.ConntrackTable, fam, filters...)
		c.mu.Unlock()
		total += n
		if err != nil {
			return total, fmt.Errorf("ipvs: delete the udp conntrack entries of %d services or backends: %w", len(filters), dumpErr(err))
		}
	}
	return total, nil
}
