//go:build peers

package peers_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/switchyard-lb/switchyard/announcers/arp"
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/test/netns"
)

const servePort = 8080

var (
	macA      = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x0a}
	macB      = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x0b}
	macClient = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x64}
	vip4      = netip.MustParseAddr("10.0.0.200")
	vip6      = netip.MustParseAddr("fd00::200")
)

// l2Node is a node namespace with the VIPs on lo, a TCP listener on them
// that answers with the node's name, and an announcer on eth0.
type l2Node struct {
	name string
	ns   *netns.NS
	mac  net.HardwareAddr
	ann  *arp.Announcer
}

type l2Lab struct {
	a, b   *l2Node
	client *netns.NS
}

func newL2Lab(t *testing.T) *l2Lab {
	t.Helper()
	netns.Require(t)
	sw := netns.NewBridge(t, "sw")
	lab := &l2Lab{client: netns.New(t, "client")}
	sw.Attach(t, lab.client, "eth0", macClient,
		netip.MustParsePrefix("10.0.0.100/24"), netip.MustParsePrefix("fd00::100/64"))
	// A names its interface; B lets Open pick interfaces and subnets.
	lab.a = newL2Node(t, sw, "A", macA, []string{"eth0"}, "10.0.0.11/24", "fd00::11/64")
	lab.b = newL2Node(t, sw, "B", macB, nil, "10.0.0.12/24", "fd00::12/64")
	return lab
}

func newL2Node(t *testing.T, sw *netns.Switch, name string, mac net.HardwareAddr, ifnames []string, addrs ...string) *l2Node {
	t.Helper()
	n := &l2Node{name: name, ns: netns.New(t, "node"+strings.ToLower(name)), mac: mac}
	// The VIPs live on lo: the kernel must neither answer ARP for them on
	// eth0 nor use them as ARP sources.
	n.ns.Run(t, "sysctl", "-qw", "net.ipv4.conf.all.arp_ignore=1", "net.ipv4.conf.all.arp_announce=2")
	var prefixes []netip.Prefix
	for _, a := range addrs {
		prefixes = append(prefixes, netip.MustParsePrefix(a))
	}
	sw.Attach(t, n.ns, "eth0", mac, prefixes...)
	n.ns.Run(t, "ip", "addr", "add", vip4.String()+"/32", "dev", "lo")
	n.ns.Run(t, "ip", "addr", "add", vip6.String()+"/128", "dev", "lo", "nodad")

	var lns []net.Listener
	err := n.ns.Do(func() error {
		for _, vip := range []netip.Addr{vip4, vip6} {
			ln, err := net.Listen("tcp", netip.AddrPortFrom(vip, servePort).String())
			if err != nil {
				return err
			}
			lns = append(lns, ln)
		}
		links, err := arp.Open(ifnames)
		if err != nil {
			return err
		}
		n.ann = arp.New(links, arp.Options{
			OnError: func(link string, err error) {
				// A link that goes down is reported once by its socket.
				if !errors.Is(err, syscall.ENETDOWN) {
					t.Errorf("node %s announcer on %s: %v", name, link, err)
				}
			},
		})
		return nil
	})
	if err != nil {
		for _, ln := range lns {
			ln.Close()
		}
		t.Fatalf("starting node %s: %v", name, err)
	}
	for _, ln := range lns {
		go serveName(ln, name)
		t.Cleanup(func() { ln.Close() })
	}
	t.Cleanup(func() {
		if err := n.ann.Close(); err != nil {
			t.Errorf("closing node %s announcer: %v", name, err)
		}
	})
	return n
}

func serveName(ln net.Listener, name string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_, _ = io.WriteString(c, name+"\n")
		c.Close()
	}
}

func (n *l2Node) announce(t *testing.T, addrs ...netip.Addr) {
	t.Helper()
	var set []model.Announcement
	for _, a := range addrs {
		set = append(set, model.Announcement{Addr: a, Service: model.ServiceKey{Namespace: "default", Name: "web"}})
	}
	if err := n.ann.Announce(context.Background(), set); err != nil {
		t.Fatalf("node %s Announce(%v): %v", n.name, addrs, err)
	}
}

// whoServes connects from the client to vip and returns the node name
// that answered.
func (l *l2Lab) whoServes(vip netip.Addr) (string, error) {
	var got string
	err := l.client.Do(func() error {
		c, err := net.DialTimeout("tcp", netip.AddrPortFrom(vip, servePort).String(), 3*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		got, err = bufio.NewReader(c).ReadString('\n')
		got = strings.TrimSpace(got)
		return err
	})
	return got, err
}

// neighMAC returns the client kernel's link-layer address for vip.
func (l *l2Lab) neighMAC(t *testing.T, vip netip.Addr) string {
	t.Helper()
	out := l.client.Run(t, "ip", "neigh", "show", vip.String(), "dev", "eth0")
	f := strings.Fields(out)
	if i := slices.Index(f, "lladdr"); i >= 0 && i+1 < len(f) {
		return f[i+1]
	}
	return ""
}

// neighWatch reports the client's neighbour updates for one address.
type neighWatch struct {
	ch   chan netlink.NeighUpdate
	done chan struct{}
	vip  netip.Addr
}

func (l *l2Lab) watchNeigh(t *testing.T, vip netip.Addr) *neighWatch {
	t.Helper()
	h, err := vnetns.GetFromName(l.client.Name())
	if err != nil {
		t.Fatalf("opening client netns: %v", err)
	}
	t.Cleanup(func() { h.Close() })
	w := &neighWatch{ch: make(chan netlink.NeighUpdate, 64), done: make(chan struct{}), vip: vip}
	if err := netlink.NeighSubscribeWithOptions(w.ch, w.done, netlink.NeighSubscribeOptions{Namespace: &h}); err != nil {
		t.Fatalf("subscribing to client neighbour updates: %v", err)
	}
	t.Cleanup(func() { close(w.done) })
	return w
}

// waitMAC returns when the client's entry for the watched address gets
// mac, with the time the update was received.
func (w *neighWatch) waitMAC(mac net.HardwareAddr, deadline time.Duration) (time.Time, error) {
	timeout := time.After(deadline)
	for {
		select {
		case u, ok := <-w.ch:
			if !ok {
				return time.Time{}, errors.New("neighbour subscription ended")
			}
			ip, _ := netip.AddrFromSlice(u.IP)
			if u.Type == unix.RTM_NEWNEIGH && ip.Unmap() == w.vip && slices.Equal(u.HardwareAddr, mac) {
				return time.Now(), nil
			}
		case <-timeout:
			return time.Time{}, fmt.Errorf("client entry for %s did not become %s within %v", w.vip, mac, deadline)
		}
	}
}

type durations []time.Duration

func (d durations) String() string {
	s := slices.Clone(d)
	slices.Sort(s)
	if len(s) == 0 {
		return "none"
	}
	ms := func(x time.Duration) string { return fmt.Sprintf("%.2fms", float64(x)/float64(time.Millisecond)) }
	return fmt.Sprintf("min %s median %s max %s (n=%d)", ms(s[0]), ms(s[len(s)/2]), ms(s[len(s)-1]), len(s))
}

func TestPeersARP(t *testing.T) {
	lab := newL2Lab(t)
	lab.a.announce(t, vip4)

	// The kernel resolver and arping both resolve the VIP to A.
	lab.client.Run(t, "ping", "-c", "1", "-W", "2", vip4.String())
	if got := lab.neighMAC(t, vip4); got != macA.String() {
		t.Fatalf("client neighbour entry for %s = %q, want A's %s", vip4, got, macA)
	}
	out := lab.client.Run(t, "arping", "-c", "2", "-i", "eth0", vip4.String())
	if !strings.Contains(strings.ToLower(out), macA.String()) || strings.Contains(strings.ToLower(out), macB.String()) {
		t.Fatalf("arping %s: want answers from A's %s only, got:\n%s", vip4, macA, out)
	}
	if got, err := lab.whoServes(vip4); err != nil || got != "A" {
		t.Fatalf("TCP to %s served by %q (%v), want A", vip4, got, err)
	}

	// Ownership moves back and forth. Each move follows traffic that
	// has just refreshed the entry, inside the kernel's 1 s locktime.
	w := lab.watchNeigh(t, vip4)
	var total durations
	from, to := lab.a, lab.b
	for i := range 6 {
		if _, err := lab.whoServes(vip4); err != nil {
			t.Fatalf("move %d: TCP before the move: %v", i, err)
		}
		start := time.Now()
		to.announce(t, vip4)
		from.announce(t)
		moved, err := w.waitMAC(to.mac, 5*time.Second)
		if err != nil {
			t.Fatalf("move %d from %s to %s: %v (entry now %q)", i, from.name, to.name, err, lab.neighMAC(t, vip4))
		}
		total = append(total, moved.Sub(start))
		if got, err := lab.whoServes(vip4); err != nil || got != to.name {
			t.Fatalf("move %d: TCP to %s served by %q (%v), want %s", i, vip4, got, err, to.name)
		}
		from, to = to, from
	}
	out = lab.client.Run(t, "arping", "-c", "1", "-i", "eth0", vip4.String())
	if !strings.Contains(strings.ToLower(out), from.mac.String()) {
		t.Errorf("arping after the moves: want %s's %s, got:\n%s", from.name, from.mac, out)
	}
	t.Logf("measured: IPv4 ownership change -> client neighbour entry moved: %v", total)
}

func TestPeersNDP(t *testing.T) {
	lab := newL2Lab(t)
	lab.a.announce(t, vip6)

	lab.client.Run(t, "ping", "-6", "-c", "1", "-W", "2", vip6.String())
	if got := lab.neighMAC(t, vip6); got != macA.String() {
		t.Fatalf("client neighbour entry for %s = %q, want A's %s", vip6, got, macA)
	}
	if got, err := lab.whoServes(vip6); err != nil || got != "A" {
		t.Fatalf("TCP to %s served by %q (%v), want A", vip6, got, err)
	}

	w := lab.watchNeigh(t, vip6)
	var total durations
	from, to := lab.a, lab.b
	for i := range 4 {
		start := time.Now()
		to.announce(t, vip6)
		from.announce(t)
		moved, err := w.waitMAC(to.mac, 5*time.Second)
		if err != nil {
			t.Fatalf("move %d from %s to %s: %v (entry now %q)", i, from.name, to.name, err, lab.neighMAC(t, vip6))
		}
		total = append(total, moved.Sub(start))
		if got, err := lab.whoServes(vip6); err != nil || got != to.name {
			t.Fatalf("move %d: TCP to %s served by %q (%v), want %s", i, vip6, got, err, to.name)
		}
		from, to = to, from
	}
	t.Logf("measured: IPv6 ownership change -> client neighbour entry moved: %v", total)

	// An entry that has expired is resolved again by solicitation.
	lab.client.Run(t, "ip", "neigh", "flush", "dev", "eth0")
	lab.client.Run(t, "ping", "-6", "-c", "1", "-W", "2", vip6.String())
	if got := lab.neighMAC(t, vip6); got != from.mac.String() {
		t.Errorf("after a flush the client resolved %s to %q, want %s's %s", vip6, got, from.name, from.mac)
	}
}

// TestPeersOwnerDies kills the owner (its link goes down and its
// announcer stops without withdrawing) while the client keeps using the
// address, then lets B take over, as the election would.
func TestPeersOwnerDies(t *testing.T) {
	for _, vip := range []netip.Addr{vip4, vip6} {
		t.Run(family(vip), func(t *testing.T) {
			lab := newL2Lab(t)
			lab.a.announce(t, vip)
			if got, err := lab.whoServes(vip); err != nil || got != "A" {
				t.Fatalf("TCP to %s served by %q (%v), want A", vip, got, err)
			}
			w := lab.watchNeigh(t, vip)

			lab.a.ns.Run(t, "ip", "link", "set", "eth0", "down")
			if err := lab.a.ann.Close(); err != nil {
				t.Fatalf("closing A's announcer: %v", err)
			}
			start := time.Now()
			lab.b.announce(t, vip)
			moved, err := w.waitMAC(macB, 5*time.Second)
			if err != nil {
				t.Fatalf("after A died: %v (entry now %q)", err, lab.neighMAC(t, vip))
			}
			got, err := lab.whoServes(vip)
			served := time.Now()
			if err != nil || got != "B" {
				t.Fatalf("TCP to %s after A died served by %q (%v), want B", vip, got, err)
			}
			t.Logf("measured: %s owner death, B announces -> client entry moved %.2fms, first TCP answer from B %.2fms",
				family(vip), float64(moved.Sub(start))/1e6, float64(served.Sub(start))/1e6)
		})
	}
}

func family(a netip.Addr) string {
	if a.Is4() {
		return "IPv4"
	}
	return "IPv6"
}
