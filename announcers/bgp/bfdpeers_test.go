package bgp

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v3/api"

	"github.com/switchyard-lb/switchyard/announcers/bgp/bfd"
	"github.com/switchyard-lb/switchyard/announcers/bgp/bfd/bfdtest"
	"github.com/switchyard-lb/switchyard/test/harness"
)

// TestBFDTearsDownAndRestores: a router (a GoBGP server) holds the
// node's route and runs BFD with it over the fake network. When the
// router's BFD packets stop reaching the node, the node's session fails
// and the speaker disables the BGP peer: the route is withdrawn at the
// router with the session still within its 9 s hold time. When they
// reach it again, BFD comes Up and the peer is enabled: the route
// returns.
func TestBFDTearsDownAndRestores(t *testing.T) {
	node, router := nextLoopback(), nextLoopback()
	peer := newTestPeer(t, router, routerASN, node, nodeASN)
	net := bfdtest.NewNetwork()

	// The router's BFD side.
	rsrv := bfd.NewServer(net.Endpoint(router), bfd.Options{})
	// 1 s detection: shorter ones flap on a loaded machine, and each flap
	// resets the BGP session, which takes seconds to come back.
	quick := bfd.Timers{DesiredMinTx: 100 * time.Millisecond, RequiredMinRx: 100 * time.Millisecond, DetectMult: 10}
	if err := rsrv.Add(bfd.Peer{Addr: node, Timers: quick}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rdone := make(chan struct{})
	go func() { rsrv.Run(ctx); close(rdone) }()
	t.Cleanup(func() { cancel(); <-rdone })

	pc := peer.peerConf(routerASN, node)
	pc.BFD = &BFD{MinRx: 100 * time.Millisecond, MinTx: 100 * time.Millisecond, Multiplier: 10}
	s, err := New(context.Background(), Config{LocalASN: nodeASN, RouterID: netip.MustParseAddr("10.0.0.11"), Peers: []Peer{pc}},
		slog.New(slog.DiscardHandler), WithBFDTransport(net.Endpoint(node)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("BFD sessions at the failure: %+v", s.BFDSessions())
		}
	})
	announce(t, s, "10.96.0.1")
	hop := map[string]route{"10.96.0.1/32": {NextHop: node.String()}}
	peer.waitRIB(t, hop)
	waitBFD(t, s, bfd.Up)

	net.Block(router, node, true)
	waitBFD(t, s, bfd.Down)
	peer.waitRIB(t, map[string]route{})
	if !s.BFDHeld(router) {
		t.Errorf("BGP peer not held down after the BFD failure")
	}
	if st := peerAdminState(t, s, router); st != api.PeerState_DOWN {
		t.Errorf("GoBGP admin state %v, want DOWN", st)
	}

	net.Block(router, node, false)
	waitBFD(t, s, bfd.Up)
	peer.waitRIB(t, hop)
	if s.BFDHeld(router) {
		t.Errorf("BGP peer still held after BFD came back")
	}
}

// TestBFDRemoteRestartKeepsBGP: a remote that replaces its BFD session
// (a Down with a new discriminator, as FRR's bfdd does once BGP is up)
// does not tear the BGP session down.
func TestBFDRemoteRestartKeepsBGP(t *testing.T) {
	node, router := nextLoopback(), nextLoopback()
	peer := newTestPeer(t, router, routerASN, node, nodeASN)
	net := bfdtest.NewNetwork()
	ep := net.Endpoint(node)
	pc := peer.peerConf(routerASN, node)
	pc.BFD = &BFD{MinRx: time.Second, MinTx: time.Second, Multiplier: 10}
	s, err := New(context.Background(), Config{LocalASN: nodeASN, RouterID: netip.MustParseAddr("10.0.0.11"), Peers: []Peer{pc}},
		slog.New(slog.DiscardHandler), WithBFDTransport(ep))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	announce(t, s, "10.96.0.1")
	peer.waitRIB(t, map[string]route{"10.96.0.1/32": {NextHop: node.String()}})

	inject := func(st bfd.State, my, your uint32) {
		p := bfd.Packet{State: st, DetectMult: 10, MyDiscriminator: my, YourDiscriminator: your, DesiredMinTx: time.Second, RequiredMinRx: time.Second}
		ep.Inject(bfd.Datagram{Payload: p.Marshal(), Src: netip.AddrPortFrom(router, 49152), TTL: 255})
	}
	inject(bfd.Down, 100, 0)
	waitBFD(t, s, bfd.Init)
	inject(bfd.Up, 100, s.BFDSessions()[0].LocalDiscr)
	waitBFD(t, s, bfd.Up)
	mine := s.BFDSessions()[0].LocalDiscr
	inject(bfd.Down, 200, 0) // the replacement
	waitBFD(t, s, bfd.Down)
	inject(bfd.Down, 200, mine)
	waitBFD(t, s, bfd.Init)
	inject(bfd.Up, 200, mine)
	waitBFD(t, s, bfd.Up)
	if s.BFDHeld(router) {
		t.Fatalf("BGP peer held down by a remote restart")
	}
	if st := peer.session(t).GetSessionState(); st != api.PeerState_ESTABLISHED {
		t.Errorf("BGP session %v after the remote's BFD restart, want established", st)
	}
}

func waitBFD(t *testing.T, s *Speaker, want bfd.State) {
	t.Helper()
	harness.Poll(t, time.Minute, func() error {
		if ss := s.BFDSessions(); len(ss) != 1 || ss[0].State != want {
			return fmt.Errorf("BFD sessions %+v, want one %s", ss, want)
		}
		return nil
	})
}

func peerAdminState(t *testing.T, s *Speaker, addr netip.Addr) api.PeerState_AdminState {
	t.Helper()
	var st api.PeerState_AdminState
	err := s.srv.ListPeer(context.Background(), &api.ListPeerRequest{Address: addr.String()}, func(p *api.Peer) { st = p.GetState().GetAdminState() })
	if err != nil {
		t.Fatal(err)
	}
	return st
}
