//go:build linux

package dsrlab

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/switchyard-lb/switchyard/test/lab"
	"github.com/switchyard-lb/switchyard/test/netns"
)

var (
	vip      = netip.MustParseAddr("192.0.2.10")
	clientIP = netip.MustParseAddr("192.168.0.2")
	routerC  = netip.MustParseAddr("192.168.0.1")
	// The IPv6 side: every link is dual-stack.
	vip6      = netip.MustParseAddr("2001:db8:ff::10")
	clientIP6 = netip.MustParseAddr("2001:db8:c::2")
	routerC6  = netip.MustParseAddr("2001:db8:c::1")
)

const (
	vipPort = 80
	podPort = 8080
)

// node is one node namespace: eth0 10.0.i.2/24 and fd00:i::2/64
// towards the router.
type node struct {
	name  string
	ns    *netns.Unnamed
	addr  netip.Addr
	addr6 netip.Addr
	// routerSide is the router's end of the node's link (r1, r2, r3).
	routerSide string
	// marks are the peer marks of the node's last dsr plan.
	marks map[string]uint32
}

// pod is a backend namespace behind its node.
type pod struct {
	name  string
	node  *node
	ns    *netns.Unnamed
	addr  netip.Addr
	addr6 netip.Addr
}

type topology struct {
	client, router *netns.Unnamed
	nodes          []*node
	pods           []*pod
}

func requireGuest(t *testing.T) {
	t.Helper()
	if os.Getenv(lab.GuestEnv) != "1" {
		t.Skipf("guest-only: needs IPVS, ipip and fou in the kernel lab (%s=1); run `make test-lab-dsr`", lab.GuestEnv)
	}
}

func do(t *testing.T, ns *netns.Unnamed, fn func() error) {
	t.Helper()
	if err := ns.Do(fn); err != nil {
		t.Fatal(err)
	}
}

func newNS(t *testing.T, name string) *netns.Unnamed {
	t.Helper()
	u, err := netns.NewUnnamed(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(u.Close)
	return u
}

// sysctl writes /proc/sys/name in the calling thread's namespace.
func sysctl(name, value string) error {
	if err := os.WriteFile(filepath.Join("/proc/sys", name), []byte(value), 0o644); err != nil {
		return fmt.Errorf("sysctl %s=%s: %w", name, value, err)
	}
	return nil
}

// link connects a (side aName, address aAddr) and b (bName, bAddr) with a
// veth pair, both up.
func link(t *testing.T, a *netns.Unnamed, aName string, aAddr netip.Prefix, b *netns.Unnamed, bName string, bAddr netip.Prefix) {
	t.Helper()
	withNetlink(t, a, func(h *netlink.Handle) error {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: aName}, PeerName: bName, PeerNamespace: netlink.NsFd(int(b.Handle()))}
		if err := h.LinkAdd(veth); err != nil {
			return fmt.Errorf("veth %s-%s: %w", aName, bName, err)
		}
		return configure(h, aName, aAddr)
	})
	withNetlink(t, b, func(h *netlink.Handle) error {
		if err := configure(h, "lo"); err != nil {
			return err
		}
		return configure(h, bName, bAddr)
	})
}

// withNetlink runs fn with a route-netlink handle in ns.
func withNetlink(t *testing.T, ns *netns.Unnamed, fn func(h *netlink.Handle) error) {
	t.Helper()
	do(t, ns, func() error {
		h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return err
		}
		defer h.Close()
		return fn(h)
	})
}

func configure(h *netlink.Handle, name string, addrs ...netip.Prefix) error {
	l, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("link %s: %w", name, err)
	}
	for _, p := range addrs {
		a := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
		if p.Addr().Is6() {
			a.Flags = unix.IFA_F_NODAD // usable at once
		}
		if err := h.AddrAdd(l, a); err != nil {
			return fmt.Errorf("address %s on %s: %w", p, name, err)
		}
	}
	if err := h.LinkSetUp(l); err != nil {
		return fmt.Errorf("%s up: %w", name, err)
	}
	return nil
}

// addAddrs binds more addresses to a link.
func addAddrs(t *testing.T, ns *netns.Unnamed, name string, addrs ...netip.Prefix) {
	t.Helper()
	withNetlink(t, ns, func(h *netlink.Handle) error { return configure(h, name, addrs...) })
}

func defaultRoute(t *testing.T, ns *netns.Unnamed, gw netip.Addr) {
	t.Helper()
	withNetlink(t, ns, func(h *netlink.Handle) error {
		return h.RouteAdd(&netlink.Route{Gw: gw.AsSlice()})
	})
}

// newTopology builds the client, the router, n1..n3, two pods behind n1
// and one behind n2. Every node starts with strict reverse-path filtering on conf/all,
// as some distributions ship it: the dsr side must cope.
func newTopology(t *testing.T) *topology {
	t.Helper()
	tp := &topology{client: newNS(t, "client"), router: newNS(t, "router")}
	link(t, tp.router, "c0", netip.PrefixFrom(routerC, 24), tp.client, "eth0", netip.PrefixFrom(clientIP, 24))
	addAddrs(t, tp.router, "c0", netip.PrefixFrom(routerC6, 64))
	addAddrs(t, tp.client, "eth0", netip.PrefixFrom(clientIP6, 64))
	defaultRoute(t, tp.client, routerC)
	defaultRoute(t, tp.client, routerC6)
	do(t, tp.router, func() error {
		if err := sysctl("net/ipv4/ip_forward", "1"); err != nil {
			return err
		}
		if err := sysctl("net/ipv6/conf/all/forwarding", "1"); err != nil {
			return err
		}
		if err := sysctl("net/ipv6/fib_multipath_hash_policy", "3"); err != nil {
			return err
		}
		if err := sysctl("net/ipv6/fib_multipath_hash_fields", "0x0037"); err != nil {
			return err
		}
		// Hash each packet's addresses, protocol and ports, as a separate
		// router does (policy 1 would take the sender socket's hash over
		// veth, which TCP changes on a retransmission).
		if err := sysctl("net/ipv4/fib_multipath_hash_policy", "3"); err != nil {
			return err
		}
		return sysctl("net/ipv4/fib_multipath_hash_fields", "0x0037")
	})
	for i := 1; i <= 3; i++ {
		n := &node{
			name:       fmt.Sprintf("n%d", i),
			addr:       netip.AddrFrom4([4]byte{10, 0, byte(i), 2}),
			addr6:      netip.AddrFrom16([16]byte{0: 0xfd, 3: byte(i), 15: 2}),
			routerSide: fmt.Sprintf("r%d", i),
		}
		n.ns = newNS(t, n.name)
		gw := netip.AddrFrom4([4]byte{10, 0, byte(i), 1})
		gw6 := netip.AddrFrom16([16]byte{0: 0xfd, 3: byte(i), 15: 1})
		link(t, tp.router, n.routerSide, netip.PrefixFrom(gw, 24), n.ns, "eth0", netip.PrefixFrom(n.addr, 24))
		addAddrs(t, tp.router, n.routerSide, netip.PrefixFrom(gw6, 64))
		addAddrs(t, n.ns, "eth0", netip.PrefixFrom(n.addr6, 64))
		defaultRoute(t, n.ns, gw)
		defaultRoute(t, n.ns, gw6)
		do(t, n.ns, func() error {
			if err := sysctl("net/ipv4/ip_forward", "1"); err != nil {
				return err
			}
			if err := sysctl("net/ipv6/conf/all/forwarding", "1"); err != nil {
				return err
			}
			return sysctl("net/ipv4/conf/all/rp_filter", "1")
		})
		tp.nodes = append(tp.nodes, n)
	}
	// Two pods on n1, one on n2; n3 has none.
	for i, host := range []*node{tp.nodes[0], tp.nodes[0], tp.nodes[1]} {
		p := &pod{
			name: fmt.Sprintf("pod%d-%s", i+1, host.name), node: host,
			addr:  netip.AddrFrom4([4]byte{10, 244, byte(i + 1), 2}),
			addr6: netip.AddrFrom16([16]byte{0: 0xfd, 1: 0x44, 3: byte(i + 1), 15: 2}),
		}
		p.ns = newNS(t, p.name)
		gw := netip.AddrFrom4([4]byte{10, 244, byte(i + 1), 1})
		gw6 := netip.AddrFrom16([16]byte{0: 0xfd, 1: 0x44, 3: byte(i + 1), 15: 1})
		link(t, host.ns, fmt.Sprintf("pod%d", i+1), netip.PrefixFrom(gw, 24), p.ns, "eth0", netip.PrefixFrom(p.addr, 24))
		addAddrs(t, host.ns, fmt.Sprintf("pod%d", i+1), netip.PrefixFrom(gw6, 64))
		addAddrs(t, p.ns, "eth0", netip.PrefixFrom(p.addr6, 64))
		defaultRoute(t, p.ns, gw)
		defaultRoute(t, p.ns, gw6)
		serve(t, p)
		tp.pods = append(tp.pods, p)
	}
	return tp
}

// serve answers HTTP on podPort: its name and the client address it sees,
// and for a POST the number of body bytes it read; and each UDP datagram
// to podPort with its name, the client address it sees and the
// datagram's size.
func serve(t *testing.T, p *pod) {
	t.Helper()
	ln, err := p.ns.Listen("tcp", fmt.Sprintf(":%d", podPort))
	if err != nil {
		t.Fatal(err)
	}
	var pc *net.UDPConn
	do(t, p.ns, func() error {
		var err error
		pc, err = net.ListenUDP("udp", &net.UDPAddr{Port: podPort})
		return err
	})
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := pc.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			// The socket is dual-stack: IPv4 clients come as mapped.
			seen := netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
			pc.WriteToUDPAddrPort([]byte(fmt.Sprintf("%s %s %d", p.name, seen, n)), from)
		}
	}()
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n, _ := io.Copy(io.Discard, r.Body)
			fmt.Fprintf(w, "%s %s %d", p.name, r.RemoteAddr, n)
		}),
		ReadHeaderTimeout: time.Minute,
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

// setECMP points the router's routes to the VIP (IPv4 and IPv6) at the
// given nodes.
func (tp *topology) setECMP(t *testing.T, nodes ...*node) {
	t.Helper()
	withNetlink(t, tp.router, func(h *netlink.Handle) error {
		for _, dst := range []netip.Addr{vip, vip6} {
			r := &netlink.Route{Dst: &net.IPNet{IP: dst.AsSlice(), Mask: net.CIDRMask(dst.BitLen(), dst.BitLen())}}
			for _, n := range nodes {
				l, err := h.LinkByName(n.routerSide)
				if err != nil {
					return err
				}
				gw := n.addr
				if dst.Is6() {
					gw = n.addr6
				}
				r.MultiPath = append(r.MultiPath, &netlink.NexthopInfo{LinkIndex: l.Attrs().Index, Gw: gw.AsSlice()})
			}
			if err := h.RouteReplace(r); err != nil {
				return fmt.Errorf("route %s over %d nodes: %w", dst, len(nodes), err)
			}
		}
		return nil
	})
}

// ecmpStage is an ECMP set the router's route goes through.
type ecmpStage struct {
	name  string
	nodes []*node
}

// ecmpStages are the changes the survival tests make: n3, which holds no
// endpoint, joins; n2 leaves; n1 leaves; n1 and n2 come back.
func (tp *topology) ecmpStages() []ecmpStage {
	n1, n2, n3 := tp.nodes[0], tp.nodes[1], tp.nodes[2]
	return []ecmpStage{
		{"start n1,n2", []*node{n1, n2}},
		{"n3 joins", []*node{n1, n2, n3}},
		{"n2 leaves", []*node{n1, n3}},
		{"n1 leaves", []*node{n3}},
		{"n1,n2 back", []*node{n1, n2, n3}},
	}
}

// throughStages moves the router's route through ecmpStages; after each
// change round sends once on every flow (total of them): every failure
// is an error, and so is any packet from the VIP through n3, which
// serves nothing. It logs each stage's counts under label.
func (tp *topology) throughStages(t *testing.T, label string, total int, round func() (ok int, perPod map[string]int, failures []string)) {
	t.Helper()
	prev := tp.readCounters(t)
	for _, st := range tp.ecmpStages() {
		tp.setECMP(t, st.nodes...)
		ok, perPod, failures := round()
		now := tp.readCounters(t)
		d := now.minus(prev)
		prev = now
		t.Logf("%s stage=%q ecmp=%s kept=%d/%d per-pod=%v to-vip n1=%d n2=%d n3=%d from-vip n1=%d n2=%d n3=%d",
			label, st.name, names(st.nodes), ok, total, perPod, d.in["n1"], d.in["n2"], d.in["n3"], d.out["n1"], d.out["n2"], d.out["n3"])
		for _, f := range failures {
			t.Errorf("%s: %s", st.name, f)
		}
		if d.out["n3"] != 0 {
			t.Errorf("%s: %d packets from the VIP left through n3, which serves nothing", st.name, d.out["n3"])
		}
	}
}

// names lists nodes' names, for logs.
func names(nodes []*node) string {
	var s []string
	for _, n := range nodes {
		s = append(s, n.name)
	}
	return strings.Join(s, ",")
}

// flow is one kept-alive HTTP connection from the client to the VIP.
type flow struct {
	conn net.Conn
	br   *bufio.Reader
	port int
	// src is the client's address, the one the pod must see.
	src netip.Addr
	// pod is the pod that answered first: every later answer must come
	// from it (another pod would have reset the connection anyway).
	pod string
	// failed says whether the last round's request failed.
	failed bool
}

// dialFlows opens n connections from the client to the IPv4 VIP, each
// from its own source port.
func (tp *topology) dialFlows(t *testing.T, n int) []*flow {
	t.Helper()
	return tp.dialFlowsTo(t, vip, n)
}

// dialFlowsTo opens n connections from the client to to, each from its
// own source port.
func (tp *topology) dialFlowsTo(t *testing.T, to netip.Addr, n int) []*flow {
	t.Helper()
	src := clientIP
	if to.Is6() {
		src = clientIP6
	}
	var out []*flow
	for range n {
		port, err := netns.NextSourcePort()
		if err != nil {
			t.Fatal(err)
		}
		var c net.Conn
		err = tp.client.Do(func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			d := net.Dialer{LocalAddr: &net.TCPAddr{Port: port}}
			var err error
			c, err = d.DialContext(ctx, "tcp", netip.AddrPortFrom(to, vipPort).String())
			return err
		})
		if err != nil {
			tp.dump(t)
			t.Fatal(err)
		}
		f := &flow{conn: c, br: bufio.NewReader(c), port: port, src: src}
		t.Cleanup(func() { c.Close() })
		out = append(out, f)
	}
	return out
}

// get sends one request with a body of size bytes on the flow and returns
// the answer: pod name, client address seen, bytes read.
func (f *flow) get(size int, timeout time.Duration) (string, error) {
	f.conn.SetDeadline(time.Now().Add(timeout))
	req, err := http.NewRequest(http.MethodPost, "http://"+f.conn.RemoteAddr().String()+"/", strings.NewReader(strings.Repeat("x", size)))
	if err != nil {
		return "", err
	}
	if err := req.Write(f.conn); err != nil {
		return "", fmt.Errorf("send: %w", err)
	}
	resp, err := http.ReadResponse(f.br, req)
	if err != nil {
		return "", fmt.Errorf("read: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("read body: %w", err)
	}
	return string(body), nil
}
