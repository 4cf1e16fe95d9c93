package cluster

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/vishvananda/netlink"
)

// The IPv6 half of the address plan: every link of the IPv4 plan carries
// an IPv6 prefix too, and the router forwards and multipaths IPv6 as it
// does IPv4, so that a suite can reach an IPv6 LoadBalancer address from
// an IPv6 client (the nodes' Node objects list both InternalIPs).
var (
	// LANPrefix6 is the LAN's IPv6 prefix; node i is ::(10+i), written
	// in decimal digits (fd00:10::11 for node1).
	LANPrefix6 = netip.MustParsePrefix("fd00:10::/64")
	// RouterLAN6 is the router's IPv6 address on the LAN, the nodes'
	// IPv6 default gateway and their IPv6 BGP peer.
	RouterLAN6 = netip.MustParseAddr("fd00:10::1")
	// ClientPrefix6, RouterOutside6 and ClientAddr6 are the client's
	// network, the router's address on it and the client's.
	ClientPrefix6  = netip.MustParsePrefix("2001:db8:113::/64")
	RouterOutside6 = netip.MustParseAddr("2001:db8:113::1")
	ClientAddr6    = netip.MustParseAddr("2001:db8:113::10")
)

// lanAddr6 is node i's (from 1) IPv6 LAN address.
func lanAddr6(i int) netip.Addr { return netip.MustParseAddr(fmt.Sprintf("fd00:10::%d", 10+i)) }

// podCIDR6 is node i's IPv6 pod prefix; its bridge holds ::1, pod j (from
// 0) ::(10+j).
func podCIDR6(i int) netip.Prefix { return netip.MustParsePrefix(fmt.Sprintf("fd00:244:%d::/64", i)) }

func podAddr6(i, j int) netip.Addr {
	return netip.MustParseAddr(fmt.Sprintf("fd00:244:%d::%d", i, 10+j))
}

// addIPv6 gives the built topology its IPv6 half: addresses on the
// router's LAN bridge and client link, the client's, every node's (eth0
// and cbr0) and pod's, default routes, host-gw routes between the
// nodes' IPv6 pod prefixes, IPv6 forwarding on the router and nodes, and
// the router's IPv6 multipath hash over addresses, protocol and ports
// (as IPv4's, startFRR). Addresses skip duplicate address detection
// (nlAddr), so they are usable at once.
func (t *Topology) addIPv6() error {
	if err := t.Router.Sysctl("net/ipv6/conf/all/forwarding", "1"); err != nil {
		return err
	}
	for s, v := range map[string]string{"net/ipv6/fib_multipath_hash_policy": "3", "net/ipv6/fib_multipath_hash_fields": "0x0037"} {
		if err := t.Router.Sysctl(s, v); err != nil {
			return err
		}
	}
	err := t.Router.configure(func(h *netlink.Handle) error {
		if err := addAddr(h, "lan0", netip.PrefixFrom(RouterLAN6, LANPrefix6.Bits())); err != nil {
			return err
		}
		return addAddr(h, "client0", netip.PrefixFrom(RouterOutside6, ClientPrefix6.Bits()))
	})
	if err != nil {
		return err
	}
	if err := t.Client.configure(func(h *netlink.Handle) error {
		return addAddrRoute(h, "eth0", netip.PrefixFrom(ClientAddr6, ClientPrefix6.Bits()), RouterOutside6)
	}); err != nil {
		return err
	}
	for _, n := range t.Nodes {
		if err := n.NS.Sysctl("net/ipv6/conf/all/forwarding", "1"); err != nil {
			return err
		}
		bridge := n.PodCIDR6.Addr().Next()
		err := n.NS.configure(func(h *netlink.Handle) error {
			if err := addAddrRoute(h, "eth0", netip.PrefixFrom(n.Addr6, LANPrefix6.Bits()), RouterLAN6); err != nil {
				return err
			}
			if err := addAddr(h, "cbr0", netip.PrefixFrom(bridge, n.PodCIDR6.Bits())); err != nil {
				return err
			}
			eth0, err := h.LinkByName("eth0")
			if err != nil {
				return err
			}
			for _, o := range t.Nodes {
				if o == n {
					continue
				}
				r := &netlink.Route{LinkIndex: eth0.Attrs().Index, Dst: ipNet(o.PodCIDR6), Gw: o.Addr6.AsSlice()}
				if err := h.RouteAdd(r); err != nil {
					return fmt.Errorf("route %s via %s: %w", o.PodCIDR6, o.Addr6, err)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, p := range n.Pods {
			if err := p.NS.configure(func(h *netlink.Handle) error {
				return addAddrRoute(h, "eth0", netip.PrefixFrom(p.Addr6, n.PodCIDR6.Bits()), bridge)
			}); err != nil {
				return err
			}
		}
	}
	return nil
}

// addAddr adds addr to link name.
func addAddr(h *netlink.Handle, name string, addr netip.Prefix) error {
	link, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("find link %s: %w", name, err)
	}
	if err := h.AddrAdd(link, nlAddr(addr)); err != nil {
		return fmt.Errorf("add %s to %s: %w", addr, name, err)
	}
	return nil
}

// addAddrRoute adds addr to link name and a default route of its family
// via gw.
func addAddrRoute(h *netlink.Handle, name string, addr netip.Prefix, gw netip.Addr) error {
	if err := addAddr(h, name, addr); err != nil {
		return err
	}
	link, err := h.LinkByName(name)
	if err != nil {
		return err
	}
	if err := h.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Gw: gw.AsSlice()}); err != nil {
		return fmt.Errorf("default route via %s: %w", gw, err)
	}
	return nil
}

// frrConf6 is the IPv6 part of bgpd's router block: every node's daemon
// peers over IPv6 too (LoadBalancerConfig's second peer), with the IPv4
// sessions' timers, and the IPv6 routes are ECMP like the IPv4 ones.
// neighbors goes with the IPv4 neighbours, family after their address
// family.
func frrConf6(nodes []*Node) (neighbors, family string) {
	var b strings.Builder
	fmt.Fprintf(&b, ` neighbor NODES6 peer-group
 neighbor NODES6 remote-as %d
 neighbor NODES6 timers 3 9
 neighbor NODES6 timers connect 1
`, NodeASN)
	for _, n := range nodes {
		fmt.Fprintf(&b, " neighbor %s peer-group NODES6\n", n.Addr6)
	}
	return b.String(), ` address-family ipv6 unicast
  neighbor NODES6 activate
  maximum-paths 8
 exit-address-family
`
}
