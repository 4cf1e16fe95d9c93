package bfd_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/announcers/bgp/bfd"
	"github.com/switchyard-lb/switchyard/announcers/bgp/bfd/bfdtest"
	"github.com/switchyard-lb/switchyard/core/runner/runnertest"
	"github.com/switchyard-lb/switchyard/test/harness"
)

const ms = time.Millisecond

var (
	nodeAddr   = netip.MustParseAddr("10.0.0.11")
	routerAddr = netip.MustParseAddr("10.0.0.1")
	fast       = bfd.Timers{DesiredMinTx: 300 * ms, RequiredMinRx: 300 * ms, DetectMult: 3}
)

// changes records OnChange calls.
type changes struct{ harness.List[bfd.Change] }

func (c *changes) add(_ netip.Addr, ch bfd.Change) { c.Add(ch) }

// scripted is a Server on a fake clock whose peer is the test: it
// injects the router's packets and reads what the server sent. Every
// iteration of the server's loop arms exactly one timer, so each input
// is followed by one WaitTimer: then the server is idle again.
type scripted struct {
	t       *testing.T
	clock   *runnertest.Clock
	ep      *bfdtest.Endpoint
	srv     *bfd.Server
	changes *changes
	next    time.Time
	read    int
}

func newScripted(t *testing.T, p bfd.Peer) *scripted {
	t.Helper()
	h := &scripted{t: t, clock: runnertest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), changes: &changes{}}
	h.ep = bfdtest.NewNetwork().Endpoint(nodeAddr)
	h.srv = bfd.NewServer(h.ep, bfd.Options{Clock: h.clock, OnChange: h.changes.add, Jitter: func(d time.Duration) time.Duration { return d }})
	if err := h.srv.Add(p); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Error("Run did not return after cancel")
		}
	})
	h.sync() // the first iteration: the first packet
	h.sync() // Add's wake-up
	return h
}

func (h *scripted) sync() { h.next = h.clock.WaitTimer(h.t) }

// at moves the fake time to t0+d, letting the server act on each of its
// deadlines on the way.
func (h *scripted) at(d time.Duration) {
	to := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(d)
	for !h.next.After(to) {
		h.clock.StepTo(h.next)
		h.sync()
	}
	h.clock.StepTo(to)
}

// inject delivers a router packet with TTL ttl from src.
func (h *scripted) inject(src netip.Addr, ttl uint8, p bfd.Packet) {
	h.ep.Inject(bfd.Datagram{Payload: p.Marshal(), Src: netip.AddrPortFrom(src, 49152), TTL: ttl})
	h.sync()
}

// sent returns the packets sent since the last call.
func (h *scripted) sent() []bfd.Packet {
	h.t.Helper()
	all := h.ep.Sent()
	var out []bfd.Packet
	for _, s := range all[h.read:] {
		if s.To != routerAddr || s.Multihop || s.SrcPort < bfd.MinSourcePort {
			h.t.Errorf("sent to %s multihop %v from port %d", s.To, s.Multihop, s.SrcPort)
		}
		p, err := bfd.Unmarshal(s.Payload)
		if err != nil {
			h.t.Fatalf("server sent a packet it cannot decode: %v", err)
		}
		out = append(out, p)
	}
	h.read = len(all)
	return out
}

func routerPacket(st bfd.State, your uint32, mod ...func(*bfd.Packet)) bfd.Packet {
	p := bfd.Packet{State: st, DetectMult: 3, MyDiscriminator: 500, YourDiscriminator: your, DesiredMinTx: 300 * ms, RequiredMinRx: 300 * ms}
	for _, m := range mod {
		m(&p)
	}
	return p
}

func states(ps []bfd.Packet) []bfd.State {
	var out []bfd.State
	for _, p := range ps {
		out = append(out, p.State)
	}
	return out
}

// TestServerSession: the server brings a session Up with a scripted
// router, refuses packets with a TTL below 255 or from another address,
// takes it Down when the router goes silent for the detection time, and
// says AdminDown when it stops.
func TestServerSession(t *testing.T) {
	h := newScripted(t, bfd.Peer{Addr: routerAddr, Timers: fast})
	first := h.sent()
	if d := cmp.Diff([]bfd.State{bfd.Down}, states(first)); d != "" || first[0].DesiredMinTx != time.Second || first[0].YourDiscriminator != 0 {
		t.Fatalf("first packets %+v, want one Down at 1 s with no your discriminator", first)
	}
	mine := first[0].MyDiscriminator

	h.inject(routerAddr, 254, routerPacket(bfd.Down, 0))                         // TTL 254: one hop away
	h.inject(netip.MustParseAddr("10.0.0.9"), 255, routerPacket(bfd.Init, mine)) // someone else
	h.inject(routerAddr, 255, routerPacket(bfd.Init, mine+1))                    // no such session
	if got := h.srv.Discarded(); got != 3 || len(h.sent()) != 0 {
		t.Fatalf("discarded %d, want 3, and nothing sent", got)
	}
	h.inject(routerAddr, 255, routerPacket(bfd.Down, 0))
	h.inject(routerAddr, 255, routerPacket(bfd.Up, mine))
	got := h.sent()
	if d := cmp.Diff([]bfd.State{bfd.Init, bfd.Up}, states(got)); d != "" || !got[1].Poll || got[1].DesiredMinTx != 300*ms {
		t.Fatalf("answers %+v, want Init then Up polling for 300 ms", got)
	}
	h.inject(routerAddr, 255, routerPacket(bfd.Up, mine, func(p *bfd.Packet) { p.Final = true }))
	h.at(800 * ms) // the periodic packets: the first at 300 ms, then every 300 ms
	ss := h.srv.Sessions()
	if len(ss) != 1 || ss[0].State != bfd.Up || ss[0].TxInterval != 300*ms || ss[0].DetectionTime != 900*ms || ss[0].Received != 3 {
		t.Fatalf("sessions %+v, want one Up, 300 ms, 900 ms, 3 packets received", ss)
	}
	// Silence: the last router packet was at t0; 900 ms later it is Down.
	h.at(1100 * ms)
	want := []bfd.Change{
		{From: bfd.Down, To: bfd.Init},
		{From: bfd.Init, To: bfd.Up},
		{From: bfd.Up, To: bfd.Down, Diag: bfd.DiagDetectionExpired},
	}
	if d := cmp.Diff(want, h.changes.All()); d != "" {
		t.Fatalf("changes (-want +got):\n%s", d)
	}
	if ss := h.srv.Sessions(); ss[0].Downs != 1 || ss[0].LastChange != time.Date(2026, 1, 1, 0, 0, 0, 900*int(ms), time.UTC) {
		t.Errorf("after the timeout: %+v, want 1 down at 900 ms", ss[0])
	}
}

// TestServerLateWake: a server that runs late for a detection deadline
// (its process was starved, the peer's packets waiting in the socket)
// gives the receive path ReceiveGrace before it expires the session: a
// packet delivered meanwhile keeps it Up; with none it goes Down,
// ReceiveGrace after it woke.
func TestServerLateWake(t *testing.T) {
	h := newScripted(t, bfd.Peer{Addr: routerAddr, Timers: fast})
	mine := h.sent()[0].MyDiscriminator
	h.inject(routerAddr, 255, routerPacket(bfd.Down, 0))
	h.inject(routerAddr, 255, routerPacket(bfd.Up, mine))
	h.inject(routerAddr, 255, routerPacket(bfd.Up, mine, func(p *bfd.Packet) { p.Final = true }))
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	up := []bfd.Change{{From: bfd.Down, To: bfd.Init}, {From: bfd.Init, To: bfd.Up}}

	// Detection is due at 900 ms; the server runs next at 1000 ms.
	h.clock.StepTo(t0.Add(1000 * ms))
	h.sync()
	if want := t0.Add(1000*ms + bfd.ReceiveGrace); !h.next.Equal(want) {
		t.Fatalf("after a late wake the server runs next at %s, want %s (the grace)", h.next.Sub(t0), want.Sub(t0))
	}
	h.inject(routerAddr, 255, routerPacket(bfd.Up, mine)) // it waited in the socket
	h.at(1100 * ms)
	if d := cmp.Diff(up, h.changes.All()); d != "" {
		t.Fatalf("a packet delivered within the grace: changes (-want +got):\n%s", d)
	}

	// Silence: detection is due at 1900 ms; the server runs next at 2000 ms.
	h.clock.StepTo(t0.Add(2000 * ms))
	h.sync()
	h.at(2100 * ms)
	want := append(up, bfd.Change{From: bfd.Up, To: bfd.Down, Diag: bfd.DiagDetectionExpired})
	if d := cmp.Diff(want, h.changes.All()); d != "" {
		t.Fatalf("nothing within the grace: changes (-want +got):\n%s", d)
	}
	if ss := h.srv.Sessions(); ss[0].LastChange != t0.Add(2000*ms+bfd.ReceiveGrace) {
		t.Errorf("went down at %s, want at the end of the grace", ss[0].LastChange.Sub(t0))
	}
}

// TestServerTwoPeers: two servers on the fake network, on the real
// clock, bring their session Up; blocking one direction takes both
// Down as a failure (one by detection, the other told by it), and
// unblocking brings them Up again.
func TestServerTwoPeers(t *testing.T) {
	n := bfdtest.NewNetwork()
	quick := bfd.Timers{DesiredMinTx: 50 * ms, RequiredMinRx: 50 * ms, DetectMult: 10}
	type side struct {
		srv *bfd.Server
		ch  *changes
	}
	var sides []side
	for _, p := range [][2]netip.Addr{{nodeAddr, routerAddr}, {routerAddr, nodeAddr}} {
		ch := &changes{}
		srv := bfd.NewServer(n.Endpoint(p[0]), bfd.Options{OnChange: ch.add})
		if err := srv.Add(bfd.Peer{Addr: p[1], Timers: quick}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { srv.Run(ctx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
		sides = append(sides, side{srv, ch})
	}
	wait := func(what string, ok func(node, router bfd.State) bool) {
		t.Helper()
		harness.Poll(t, time.Minute, func() error {
			if a, b := sides[0].srv.Sessions()[0].State, sides[1].srv.Sessions()[0].State; !ok(a, b) {
				return fmt.Errorf("%s: node %s, router %s", what, a, b)
			}
			return nil
		})
	}
	bothUp := func(a, b bfd.State) bool { return a == bfd.Up && b == bfd.Up }
	wait("handshake", bothUp)
	n.Block(routerAddr, nodeAddr, true)
	// The node hears nothing and stays Down; the router hears its Down
	// and, as RFC 5880 says, answers the next one with Init.
	wait("router's packets blocked", func(a, b bfd.State) bool { return a == bfd.Down && b != bfd.Up })
	for i, s := range sides {
		var failed bool
		for _, c := range s.ch.All() {
			failed = failed || c.Failure()
		}
		if !failed {
			t.Errorf("side %d: changes %+v, want a failure", i, s.ch.All())
		}
	}
	if got := sides[0].ch.All(); got[len(got)-1].Diag != bfd.DiagDetectionExpired {
		t.Errorf("node's last change %+v, want detection time expired", got[len(got)-1])
	}
	n.Block(routerAddr, nodeAddr, false)
	wait("unblocked", bothUp)
}

// TestUDPTransport: over loopback, a session's socket sends from the
// dynamic port range with TTL 255 and the listener reads that TTL.
func TestUDPTransport(t *testing.T) {
	tr, err := bfd.ListenUDP(false)
	if errors.Is(err, syscall.EADDRINUSE) {
		t.Skipf("port %d is taken on this host: %v", bfd.PortSingleHop, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	lo := netip.MustParseAddr("127.0.0.1")
	tx, err := tr.Open(lo, false)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	p := bfd.Packet{State: bfd.Down, DetectMult: 3, MyDiscriminator: 42, DesiredMinTx: time.Second}
	if err := tx.Send(p.Marshal()); err != nil {
		t.Fatal(err)
	}
	got := make(chan bfd.Datagram, 1)
	go func() {
		d, err := tr.Receive()
		if err == nil {
			got <- d
		}
		close(got)
	}()
	select {
	case d, ok := <-got:
		if !ok {
			t.Fatal("Receive failed")
		}
		if d.Src.Addr() != lo || d.Src.Port() < bfd.MinSourcePort || d.TTL != bfd.TTL || d.Multihop {
			t.Errorf("datagram from %s TTL %d multihop %v, want 127.0.0.1 from a port >= 49152, TTL 255, single hop", d.Src, d.TTL, d.Multihop)
		}
		if q, err := bfd.Unmarshal(d.Payload); err != nil || q != p {
			t.Errorf("payload %+v, %v; want %+v", q, err, p)
		}
	case <-time.After(time.Minute):
		t.Fatal("nothing received over loopback")
	}
}

// TestServerMultihop: a multihop session (RFC 5883) takes packets on the
// multihop port with a TTL down to its minimum, and refuses lower TTLs
// and packets on the single-hop port; it sends to the multihop port.
func TestServerMultihop(t *testing.T) {
	h := newScripted(t, bfd.Peer{Addr: routerAddr, Multihop: true, MinTTL: 254, Timers: fast})
	sent := h.ep.Sent()
	if len(sent) != 1 || !sent[0].Multihop {
		t.Fatalf("first packets %+v, want one to the multihop port", sent)
	}
	h.read = len(sent)
	inject := func(ttl uint8, multihop bool) {
		p := routerPacket(bfd.Down, 0)
		h.ep.Inject(bfd.Datagram{Payload: p.Marshal(), Src: netip.AddrPortFrom(routerAddr, 49152), TTL: ttl, Multihop: multihop})
		h.sync()
	}
	inject(253, true)  // one router too many
	inject(255, false) // the single-hop port
	if got := h.srv.Discarded(); got != 2 {
		t.Fatalf("discarded %d, want 2", got)
	}
	inject(254, true)
	if ss := h.srv.Sessions(); ss[0].State != bfd.Init || !ss[0].Multihop {
		t.Fatalf("sessions %+v, want the multihop one in Init", ss)
	}
}
