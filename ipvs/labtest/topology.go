//go:build linux

package labtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/switchyard-lb/switchyard/test/netns"
)

// Ports the backends serve.
const (
	HTTPPort = 8080
	UDPPort  = 5353
)

// DummyName is the interface that holds virtual IPs.
const DummyName = "switchyard0"

// Namespace is a network namespace. The zero Namespace (Root) is the
// node's own namespace.
type Namespace struct {
	Name string
	ns   *netns.Unnamed // nil for the root namespace
}

// Root is the node's namespace, the one the test process starts in.
var Root = &Namespace{Name: "node"}

// newNamespace creates an unnamed network namespace.
func newNamespace(name string) (*Namespace, error) {
	u, err := netns.NewUnnamed(name)
	if err != nil {
		return nil, err
	}
	return &Namespace{Name: name, ns: u}, nil
}

// Do runs fn on an OS thread inside the namespace. Sockets fn creates
// belong to the namespace and stay usable from any goroutine afterwards.
// The thread is discarded after fn, so the namespace switch cannot leak
// into other goroutines (kernel-lab.md pitfall 5). In Root, fn runs on the
// calling goroutine.
func (ns *Namespace) Do(fn func() error) error {
	if ns.ns == nil {
		return fn()
	}
	return ns.ns.Do(fn)
}

// netlink returns a route-netlink handle for the namespace. Only
// NETLINK_ROUTE: the default set includes XFRM, which the guest lacks
// (kernel-lab.md pitfall 4).
func (ns *Namespace) netlink() (*netlink.Handle, error) {
	if ns.ns == nil {
		return netlink.NewHandle(unix.NETLINK_ROUTE)
	}
	return netlink.NewHandleAt(ns.ns.Handle(), unix.NETLINK_ROUTE)
}

func (ns *Namespace) close() {
	if ns.ns != nil {
		ns.ns.Close()
	}
}

// Backend is one server namespace.
type Backend struct {
	Name string
	NS   *Namespace
	IPv4 netip.Addr
	IPv6 netip.Addr
	stop []io.Closer
}

// Topology is the node, its backends and a client namespace.
type Topology struct {
	Client     *Namespace
	ClientIPv4 netip.Addr
	ClientIPv6 netip.Addr
	Backends   []*Backend
	// SCTP is whether the backends serve SCTP on SCTPPort.
	SCTP  bool
	node  *netlink.Handle
	dummy netlink.Link
	links []netlink.Link // node-side veths
}

// NewTopology builds n backends (be1..beN at 10.244.N.2 and fd00:244:N::2)
// and a client namespace (10.244.0.2, fd00:244::2), each behind a veth pair
// to the node, turns on forwarding and creates switchyard0.
func NewTopology(n int) (_ *Topology, err error) {
	node, err := Root.netlink()
	if err != nil {
		return nil, fmt.Errorf("node netlink: %w", err)
	}
	t := &Topology{node: node}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	for _, s := range []string{"net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding"} {
		if err := os.WriteFile("/proc/sys/"+s, []byte("1"), 0o644); err != nil {
			return nil, fmt.Errorf("sysctl %s: %w", s, err)
		}
	}
	t.dummy = &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: DummyName}}
	if err := node.LinkAdd(t.dummy); err != nil {
		return nil, fmt.Errorf("create %s: %w", DummyName, err)
	}

	t.Client, err = newNamespace("client")
	if err != nil {
		return nil, err
	}
	t.ClientIPv4, t.ClientIPv6, err = t.wire(t.Client, "sy-client", 0)
	if err != nil {
		return nil, err
	}
	for i := 1; i <= n; i++ {
		be := &Backend{Name: fmt.Sprintf("be%d", i)}
		t.Backends = append(t.Backends, be)
		if be.NS, err = newNamespace(be.Name); err != nil {
			return nil, err
		}
		if be.IPv4, be.IPv6, err = t.wire(be.NS, "sy-"+be.Name, i); err != nil {
			return nil, err
		}
		if err := be.serve(); err != nil {
			return nil, err
		}
		switch err := be.serveSCTP(); {
		case err == nil:
			t.SCTP = true
		case !errors.Is(err, ErrNoSCTP):
			return nil, err
		}
	}
	return t, nil
}

// wire connects ns to the node through a veth pair on subnet index i:
// node 10.244.i.1/24 and fd00:244:i::1/64, ns .2 and ::2 with default
// routes through the node.
func (t *Topology) wire(ns *Namespace, nodeSide string, i int) (v4, v6 netip.Addr, err error) {
	nodeV4 := netip.AddrFrom4([4]byte{10, 244, byte(i), 1})
	v4 = netip.AddrFrom4([4]byte{10, 244, byte(i), 2})
	nodeV6 := netip.MustParseAddr(fmt.Sprintf("fd00:244:%x::1", i))
	v6 = netip.MustParseAddr(fmt.Sprintf("fd00:244:%x::2", i))

	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: nodeSide},
		PeerName:      "eth0",
		PeerNamespace: netlink.NsFd(int(ns.ns.Handle())),
	}
	if err := t.node.LinkAdd(veth); err != nil {
		return v4, v6, fmt.Errorf("create veth %s: %w", nodeSide, err)
	}
	t.links = append(t.links, veth)
	if err := configureLink(t.node, nodeSide, netip.PrefixFrom(nodeV4, 24), netip.PrefixFrom(nodeV6, 64)); err != nil {
		return v4, v6, err
	}
	h, err := ns.netlink()
	if err != nil {
		return v4, v6, fmt.Errorf("netlink in %s: %w", ns.Name, err)
	}
	defer h.Close()
	if err := configureLink(h, "lo"); err != nil {
		return v4, v6, err
	}
	if err := configureLink(h, "eth0", netip.PrefixFrom(v4, 24), netip.PrefixFrom(v6, 64)); err != nil {
		return v4, v6, err
	}
	eth0, err := h.LinkByName("eth0")
	if err != nil {
		return v4, v6, fmt.Errorf("%s eth0: %w", ns.Name, err)
	}
	for _, gw := range []netip.Addr{nodeV4, nodeV6} {
		route := &netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: gw.AsSlice()}
		if err := h.RouteAdd(route); err != nil {
			return v4, v6, fmt.Errorf("%s default route via %s: %w", ns.Name, gw, err)
		}
	}
	return v4, v6, nil
}

// configureLink adds addresses (without duplicate address detection, which
// would leave IPv6 addresses tentative for seconds) and sets the link up.
func configureLink(h *netlink.Handle, name string, addrs ...netip.Prefix) error {
	link, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("find link %s: %w", name, err)
	}
	for _, p := range addrs {
		if err := h.AddrAdd(link, nlAddr(p)); err != nil {
			return fmt.Errorf("add %s to %s: %w", p, name, err)
		}
	}
	if err := h.LinkSetUp(link); err != nil {
		return fmt.Errorf("set %s up: %w", name, err)
	}
	return nil
}

func nlAddr(p netip.Prefix) *netlink.Addr {
	return &netlink.Addr{
		IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())},
		Flags: unix.IFA_F_NODAD,
	}
}

// AddVIP binds addr (as a /32 or /128) to switchyard0, the way the
// dataplane binds service IPs: the link stays down, the kernel still
// treats the address as local.
func (t *Topology) AddVIP(addr netip.Addr) error {
	if err := t.node.AddrAdd(t.dummy, nlAddr(netip.PrefixFrom(addr, addr.BitLen()))); err != nil {
		return fmt.Errorf("bind %s to %s: %w", addr, DummyName, err)
	}
	return nil
}

// DelVIP removes addr from switchyard0.
func (t *Topology) DelVIP(addr netip.Addr) error {
	if err := t.node.AddrDel(t.dummy, nlAddr(netip.PrefixFrom(addr, addr.BitLen()))); err != nil {
		return fmt.Errorf("unbind %s from %s: %w", addr, DummyName, err)
	}
	return nil
}

// SetDummyUp sets switchyard0 up or down.
func (t *Topology) SetDummyUp(up bool) error {
	set := t.node.LinkSetDown
	if up {
		set = t.node.LinkSetUp
	}
	if err := set(t.dummy); err != nil {
		return fmt.Errorf("set %s up=%t: %w", DummyName, up, err)
	}
	return nil
}

// Close stops the servers and removes the links and namespaces it made.
func (t *Topology) Close() {
	for _, be := range t.Backends {
		for _, c := range be.stop {
			c.Close()
		}
		if be.NS != nil {
			be.NS.close()
		}
	}
	if t.Client != nil {
		t.Client.close()
	}
	for _, l := range t.links {
		t.node.LinkDel(l)
	}
	if t.dummy != nil {
		t.node.LinkDel(t.dummy)
	}
	t.node.Close()
}

// serve starts the backend's HTTP and UDP servers inside its namespace.
// Both listen on the wildcard address, so they answer over IPv4 and IPv6.
func (be *Backend) serve() error {
	var (
		ln  net.Listener
		udp net.PacketConn
	)
	err := be.NS.Do(func() error {
		var err error
		if ln, err = net.Listen("tcp", fmt.Sprintf(":%d", HTTPPort)); err != nil {
			return fmt.Errorf("%s: listen http: %w", be.Name, err)
		}
		if udp, err = net.ListenPacket("udp", fmt.Sprintf(":%d", UDPPort)); err != nil {
			ln.Close()
			return fmt.Errorf("%s: listen udp: %w", be.Name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/source" {
				// The client address the backend sees, for masquerade.
				io.WriteString(w, be.Name+" "+r.RemoteAddr)
				return
			}
			io.WriteString(w, be.Name)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go srv.Serve(ln)
	go func() {
		buf := make([]byte, 1500)
		for {
			_, from, err := udp.ReadFrom(buf)
			if err != nil {
				return // closed
			}
			udp.WriteTo([]byte(be.Name), from)
		}
	}()
	be.stop = append(be.stop, srv, udp)
	return nil
}

// Split sends n requests from namespace from to target, each on a new
// connection (TCP) or a new flow (UDP) with its own source port, and counts
// the answers per backend name. Any failed request is an error: the counts
// are only returned when all n were answered.
func Split(ctx context.Context, from *Namespace, network string, target netip.AddrPort, n int) (map[string]int, error) {
	var ask func(ctx context.Context, srcPort int, target netip.AddrPort) (string, error)
	switch network {
	case "tcp":
		ask = httpGet
	case "udp":
		ask = udpAsk
	default:
		return nil, fmt.Errorf("unknown network %q", network)
	}
	return splitAsk(from, n, "request", network+"/"+target.String(), func(port int) (string, error) {
		return ask(ctx, port, target)
	})
}

// splitAsk calls ask n times inside namespace from, each time with a new
// source port, and counts the answers per backend name. what and to name
// one ask and its target in errors; the counts are only returned when all
// n were answered.
func splitAsk(from *Namespace, n int, what, to string, ask func(srcPort int) (string, error)) (map[string]int, error) {
	got := map[string]int{}
	err := from.Do(func() error {
		for i := range n {
			port, err := netns.NextSourcePort()
			if err != nil {
				return err
			}
			name, err := ask(port)
			if err != nil {
				return fmt.Errorf("%s %d of %d to %s from %s: %w", what, i+1, n, to, from.Name, err)
			}
			got[name]++
		}
		return nil
	})
	return got, err
}

// SplitConcurrently is Split over TCP with all n requests in flight at
// once, each on a new connection from its own source port. A guest on a
// loaded host answers such a burst several times faster than n requests
// in turn.
func SplitConcurrently(ctx context.Context, from *Namespace, target netip.AddrPort, n int) (map[string]int, error) {
	type answer struct {
		name string
		err  error
	}
	answers := make(chan answer, n)
	for range n {
		go func() {
			var a answer
			a.err = from.Do(func() error {
				port, err := netns.NextSourcePort()
				if err != nil {
					return err
				}
				a.name, err = httpGet(ctx, port, target)
				return err
			})
			answers <- a
		}()
	}
	got := map[string]int{}
	var errs []error
	for range n {
		a := <-answers
		if a.err != nil {
			errs = append(errs, a.err)
			continue
		}
		got[a.name]++
	}
	if errs != nil {
		return got, fmt.Errorf("%d of %d concurrent requests to tcp/%s from %s: %w", len(errs), n, target, from.Name, errors.Join(errs...))
	}
	return got, nil
}

// answerTimeout bounds a request that should be answered. It only bounds a
// failure, so it is generous: under TCG on a loaded 2-core host (load ~40)
// the guest stalls for seconds at a time, and a 5 s bound failed dials the
// kernel's own SYN retransmission would have completed (issue 9). Checks
// that expect no answer pass a context with their own short deadline.
const answerTimeout = 2 * time.Minute

// silence is how long a check that expects no answer waits for one: an
// answered request takes milliseconds on an idle host.
const silence = 5 * time.Second

// resendEvery is how long udpAsk waits for an answer before it resends
// the datagram on the same flow.
const resendEvery = 2 * time.Second

// httpGet makes one request for / from the given source port and returns
// the answering backend's name.
func httpGet(ctx context.Context, srcPort int, target netip.AddrPort) (string, error) {
	return httpGetPath(ctx, srcPort, target, "/")
}

// Source makes one request from namespace from to target and returns the
// answering backend's name and the client address it saw.
func Source(ctx context.Context, from *Namespace, target netip.AddrPort) (string, netip.Addr, error) {
	var body string
	err := from.Do(func() error {
		port, err := netns.NextSourcePort()
		if err != nil {
			return err
		}
		body, err = httpGetPath(ctx, port, target, "/source")
		return err
	})
	if err != nil {
		return "", netip.Addr{}, fmt.Errorf("request to %s from %s: %w", target, from.Name, err)
	}
	name, addr, _ := strings.Cut(body, " ")
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return "", netip.Addr{}, fmt.Errorf("backend %s answered source %q: %w", name, addr, err)
	}
	return name, ap.Addr().Unmap(), nil
}

func httpGetPath(ctx context.Context, srcPort int, target netip.AddrPort, path string) (string, error) {
	body, err := netns.HTTPGet(ctx, srcPort, target, path, answerTimeout)
	return strings.TrimSpace(body), err
}

// udpAsk sends one datagram from the given source port and returns the
// answer. A lost datagram is resent every resendEvery from the same port,
// which keeps the flow, and therefore its backend, the same, until
// answerTimeout or ctx ends.
func udpAsk(ctx context.Context, srcPort int, target netip.AddrPort) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, answerTimeout)
	defer cancel()
	network := "udp4"
	if target.Addr().Is6() {
		network = "udp6"
	}
	conn, err := net.ListenUDP(network, &net.UDPAddr{Port: srcPort})
	if err != nil {
		return "", err
	}
	defer conn.Close()
	dst := net.UDPAddrFromAddrPort(target)
	buf := make([]byte, 1500)
	var lastErr error
	for {
		if err := ctx.Err(); err != nil {
			return "", fmt.Errorf("no answer: %w", errors.Join(err, lastErr))
		}
		if _, err := conn.WriteToUDP([]byte("who"), dst); err != nil {
			return "", fmt.Errorf("send: %w", err)
		}
		wait := time.Now().Add(resendEvery)
		if dl, _ := ctx.Deadline(); dl.Before(wait) {
			wait = dl
		}
		conn.SetReadDeadline(wait)
		n, from, err := conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			lastErr = err
			continue
		}
		if from.Addr().Unmap() != target.Addr() || from.Port() != target.Port() {
			return "", fmt.Errorf("answer from %s, want %s", from, target)
		}
		return string(buf[:n]), nil
	}
}

// HTTPConn is one kept-alive HTTP/1.1 connection: every Get travels on the
// same TCP connection, so it reaches the backend IPVS chose when it was
// opened.
type HTTPConn struct {
	conn   net.Conn
	br     *bufio.Reader
	target netip.AddrPort
	// Timeout bounds each Get; DialHTTP sets it to answerTimeout.
	Timeout time.Duration
}

// DialHTTP opens a connection from namespace from to target, from a unique
// source port.
func DialHTTP(ctx context.Context, from *Namespace, target netip.AddrPort) (*HTTPConn, error) {
	var c net.Conn
	err := from.Do(func() error {
		port, err := netns.NextSourcePort()
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, answerTimeout)
		defer cancel()
		d := net.Dialer{LocalAddr: &net.TCPAddr{Port: port}}
		c, err = d.DialContext(ctx, "tcp", target.String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("dial %s from %s: %w", target, from.Name, err)
	}
	return &HTTPConn{conn: c, br: bufio.NewReader(c), target: target, Timeout: answerTimeout}, nil
}

// Get sends one request on the connection and returns the answering
// backend's name.
func (h *HTTPConn) Get() (string, error) {
	h.conn.SetDeadline(time.Now().Add(h.Timeout))
	if _, err := fmt.Fprintf(h.conn, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", h.target); err != nil {
		return "", fmt.Errorf("send request: %w", err)
	}
	resp, err := http.ReadResponse(h.br, nil)
	if err != nil {
		return "", fmt.Errorf("read response: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("read body: %w", err)
	}
	if resp.Close {
		return "", errors.New("server closed the kept-alive connection")
	}
	return strings.TrimSpace(string(body)), nil
}

// Close closes the connection.
func (h *HTTPConn) Close() error { return h.conn.Close() }
