package arp

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/mdlayher/ndp"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv6"
)

// ndpConn is an ICMPv6 socket that names its interface by index only.
// ndp.Conn puts the interface name in every destination's zone, which Go
// resolves through a process-wide name cache: wrong as soon as the socket
// lives in another network namespace than the one the cache was filled
// from, and after a rename. Messages are still built and parsed by
// mdlayher/ndp.
type ndpConn struct {
	pc  *ipv6.PacketConn
	ifi net.Interface
}

var _ NDPConn = (*ndpConn)(nil)

// listenNDP opens an ICMPv6 socket for ifi, bound to "::" so that unicast
// solicitations for owned addresses (the kernel's reachability probes) are
// received as well as multicast ones, with only neighbour solicitations
// let through.
func listenNDP(ifi *net.Interface) (*ndpConn, error) {
	ic, err := icmp.ListenPacket("ip6:ipv6-icmp", "::")
	if err != nil {
		return nil, fmt.Errorf("listening for ICMPv6: %w", err)
	}
	c := &ndpConn{pc: ic.IPv6PacketConn(), ifi: *ifi}
	var f ipv6.ICMPFilter
	f.SetAll(true)
	f.Accept(ipv6.ICMPTypeNeighborSolicitation)
	for _, step := range []struct {
		what string
		do   func() error
	}{
		{"setting the hop limit", func() error { return c.pc.SetHopLimit(ndp.HopLimit) }},
		{"setting the multicast hop limit", func() error { return c.pc.SetMulticastHopLimit(ndp.HopLimit) }},
		{"filtering ICMPv6", func() error { return c.pc.SetICMPFilter(&f) }},
		{"asking for the receiving interface", func() error { return c.pc.SetControlMessage(ipv6.FlagInterface, true) }},
	} {
		if err := step.do(); err != nil {
			_ = c.pc.Close()
			return nil, fmt.Errorf("%s: %w", step.what, err)
		}
	}
	return c, nil
}

func (c *ndpConn) ReadFrom() (ndp.Message, *ipv6.ControlMessage, netip.Addr, error) {
	b := make([]byte, max(c.ifi.MTU, 1280))
	for {
		n, cm, src, err := c.pc.ReadFrom(b)
		if err != nil {
			return nil, nil, netip.Addr{}, err
		}
		m, ip, err := parseNDP(b[:n], src)
		if err != nil {
			continue // not ours to judge: malformed or another type
		}
		return m, cm, ip, nil
	}
}

// parseNDP decodes an ICMPv6 message read from src: the message and the
// sender's address (invalid when src is not an IP address).
func parseNDP(b []byte, src net.Addr) (ndp.Message, netip.Addr, error) {
	m, err := ndp.ParseMessage(b)
	if err != nil {
		return nil, netip.Addr{}, err
	}
	var ip netip.Addr
	if a, ok := src.(*net.IPAddr); ok {
		ip, _ = netip.AddrFromSlice(a.IP)
	}
	return m, ip, nil
}

func (c *ndpConn) WriteTo(m ndp.Message, cm *ipv6.ControlMessage, dst netip.Addr) error {
	b, err := ndp.MarshalMessage(m)
	if err != nil {
		return err
	}
	if cm == nil {
		cm = &ipv6.ControlMessage{HopLimit: ndp.HopLimit}
	}
	if cm.IfIndex == 0 {
		cm.IfIndex = c.ifi.Index
	}
	_, err = c.pc.WriteTo(b, cm, &net.IPAddr{IP: dst.AsSlice()})
	return err
}

func (c *ndpConn) JoinGroup(group netip.Addr) error {
	return c.pc.JoinGroup(&c.ifi, &net.IPAddr{IP: group.AsSlice()})
}

func (c *ndpConn) LeaveGroup(group netip.Addr) error {
	return c.pc.LeaveGroup(&c.ifi, &net.IPAddr{IP: group.AsSlice()})
}

func (c *ndpConn) Close() error { return c.pc.Close() }
