package arp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"golang.org/x/net/ipv6"
)

// ARPConn is what the announcer uses of an ARP socket; *arp.Client
// implements it.
type ARPConn interface {
	Read() (*arp.Packet, *ethernet.Frame, error)
	WriteTo(p *arp.Packet, addr net.HardwareAddr) error
	Close() error
}

// NDPConn is what the announcer uses of an ICMPv6 socket. Open's
// implementation names the interface by index, not by zone.
type NDPConn interface {
	ReadFrom() (ndp.Message, *ipv6.ControlMessage, netip.Addr, error)
	WriteTo(m ndp.Message, cm *ipv6.ControlMessage, dst netip.Addr) error
	JoinGroup(group netip.Addr) error
	LeaveGroup(group netip.Addr) error
	Close() error
}

var _ ARPConn = (*arp.Client)(nil)

// Link is one interface the announcer speaks on, with its sockets.
type Link struct {
	Name  string
	Index int
	MAC   net.HardwareAddr
	// ARP is nil when the interface has no IPv4 address.
	ARP ARPConn
	// NDP is nil when the interface has no IPv6 address. It may receive
	// messages of other interfaces: those whose control message names
	// another interface index are ignored.
	NDP NDPConn
	// LinkLocal is the source of advertisements; when invalid the kernel
	// chooses one.
	LinkLocal netip.Addr
	// Only, when not empty, limits the link to the addresses inside these
	// prefixes (its on-link subnets when Open picked it).
	Only []netip.Prefix
}

// serves reports whether addr may be answered and announced on l.
func (l *Link) serves(addr netip.Addr) bool {
	if len(l.Only) == 0 {
		return true
	}
	for _, p := range l.Only {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

func (l *Link) close() error {
	var errs []error
	if l.ARP != nil {
		if err := l.ARP.Close(); err != nil {
			errs = append(errs, fmt.Errorf("closing ARP socket on %s: %w", l.Name, err))
		}
	}
	if l.NDP != nil {
		if err := l.NDP.Close(); err != nil {
			errs = append(errs, fmt.Errorf("closing ICMPv6 socket on %s: %w", l.Name, err))
		}
	}
	return errors.Join(errs...)
}

// Open opens the packet sockets of the named interfaces: ARP where the
// interface has an IPv4 address, ICMPv6 where it has an IPv6 one. It needs
// CAP_NET_RAW, and the sockets stay in the network namespace of the calling
// thread.
//
// With no names, Open picks every interface that is up, is not a loopback,
// has an Ethernet address and an IP address, and limits each to the
// addresses on its subnets: an address is then served where the node has a
// connected route towards it.
func Open(names []string) ([]Link, error) {
	auto := len(names) == 0
	if auto {
		var err error
		if names, err = autoInterfaces(); err != nil {
			return nil, err
		}
	}
	links := make([]Link, 0, len(names))
	fail := func(err error) ([]Link, error) {
		for i := range links {
			_ = links[i].close()
		}
		return nil, err
	}
	for _, name := range names {
		l, err := openLink(name, auto)
		if errors.Is(err, errNoSubnet) {
			continue
		}
		if err != nil {
			return fail(err)
		}
		links = append(links, l)
	}
	if len(links) == 0 {
		return nil, errors.New("no interface is up with an Ethernet address and an IP subnet")
	}
	return links, nil
}

func autoInterfaces() ([]string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("listing interfaces: %w", err)
	}
	var names []string
	for _, ifi := range ifs {
		if ifi.Flags&net.FlagUp == 0 || ifi.Flags&net.FlagLoopback != 0 || len(ifi.HardwareAddr) != 6 {
			continue
		}
		if addrs, err := ifi.Addrs(); err == nil && len(addrs) > 0 {
			names = append(names, ifi.Name)
		}
	}
	return names, nil
}

// errNoSubnet skips an interface that Open picked but that has only
// link-local addresses.
var errNoSubnet = errors.New("no subnet beyond link-local")

func openLink(name string, onlySubnets bool) (Link, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return Link{}, fmt.Errorf("looking up interface %s: %w", name, err)
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return Link{}, fmt.Errorf("listing addresses of %s: %w", name, err)
	}
	l := Link{Name: name, Index: ifi.Index, MAC: ifi.HardwareAddr}
	if len(l.MAC) != 6 {
		return Link{}, fmt.Errorf("interface %s has no Ethernet address", name)
	}
	var has4, has6 bool
	for _, a := range addrs {
		p, err := netip.ParsePrefix(a.String())
		if err != nil {
			continue
		}
		if onlySubnets && !p.Addr().IsLinkLocalUnicast() {
			l.Only = append(l.Only, p.Masked())
		}
		switch ip := p.Addr(); {
		case ip.Is4():
			has4 = true
		case ip.IsLinkLocalUnicast():
			has6 = true
			l.LinkLocal = ip
		case ip.Is6():
			has6 = true
		}
	}
	if !has4 && !has6 {
		return Link{}, fmt.Errorf("interface %s has no IP address", name)
	}
	if onlySubnets && len(l.Only) == 0 {
		return Link{}, errNoSubnet
	}
	if has4 {
		c, err := dialARP(ifi)
		if err != nil {
			return Link{}, fmt.Errorf("opening ARP socket on %s: %w", name, err)
		}
		l.ARP = c
	}
	if has6 {
		c, err := listenNDP(ifi)
		if err != nil {
			_ = l.close()
			return Link{}, fmt.Errorf("opening ICMPv6 socket on %s: %w", name, err)
		}
		l.NDP = c
	}
	return l, nil
}

// Listen opens the named interfaces (all suitable ones when names is
// empty, see Open) and starts an Announcer on them.
func Listen(names []string, opts Options) (*Announcer, error) {
	links, err := Open(names)
	if err != nil {
		return nil, err
	}
	a := New(links, opts)
	a.checkLink = linkState
	return a, nil
}

// linkState reports whether the interface a Link was opened on still
// exists under its name and is up: its sockets are useless otherwise
// (a deleted interface's index is not reused for another at once, and a
// re-created one gets a new index).
func linkState(index int, name string) error {
	ifi, err := net.InterfaceByIndex(index)
	if err != nil || ifi.Name != name {
		return fmt.Errorf("interface %s (index %d) is gone", name, index)
	}
	if ifi.Flags&net.FlagUp == 0 {
		return fmt.Errorf("interface %s is down", name)
	}
	return nil
}
