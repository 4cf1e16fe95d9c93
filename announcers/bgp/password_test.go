package bgp

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	api "github.com/osrg/gobgp/v3/api"
)

// setRouterPassword replaces the router's neighbour for the speaker at
// node with one expecting password, as an operator rotating the key on
// the router would: the router ends the session and only accepts one
// signed with the new key.
func (p *testPeer) setRouterPassword(t *testing.T, node netip.Addr, password string) {
	t.Helper()
	ctx := context.Background()
	var old *api.Peer
	err := p.srv.ListPeer(ctx, &api.ListPeerRequest{Address: node.String()}, func(x *api.Peer) { old = x })
	if err != nil || old == nil {
		t.Fatalf("router has no neighbour %s (%v)", node, err)
	}
	if err := p.srv.DeletePeer(ctx, &api.DeletePeerRequest{Address: node.String()}); err != nil {
		t.Fatalf("router: delete neighbour: %v", err)
	}
	var fams []*api.AfiSafi
	for _, f := range []*api.Family{familyIPv4, familyIPv6} {
		fams = append(fams, &api.AfiSafi{Config: &api.AfiSafiConfig{Family: f, Enabled: true}})
	}
	err = p.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: &api.Peer{
		Conf:      &api.PeerConf{NeighborAddress: node.String(), PeerAsn: old.GetConf().GetPeerAsn(), AuthPassword: password},
		Transport: &api.Transport{PassiveMode: true},
		Timers:    &api.Timers{Config: &api.TimersConfig{IdleHoldTimeAfterReset: 1}},
		AfiSafis:  fams,
	}})
	if err != nil {
		t.Fatalf("router: add neighbour with a new password: %v", err)
	}
}

// TestSetPassword starts a peer AdminDown (its password unknown), brings
// it up with SetPassword, then rotates the key on both sides: the
// session and the route only come back because SetPassword re-creates
// the peer with the new key (GoBGP's UpdatePeer would ignore it).
func TestSetPassword(t *testing.T) {
	node, routerAddr := nextLoopback(), nextLoopback()
	router := newTestPeerAuth(t, routerAddr, routerASN, node, nodeASN, "first")
	pc := router.peerConf(routerASN, node)
	pc.AdminDown = true
	s := newSpeaker(t, Config{LocalASN: nodeASN, RouterID: netip.MustParseAddr("10.0.0.11"), Peers: []Peer{pc}})
	announce(t, s, "198.51.100.7")

	sess, err := s.Sessions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(sess) != 1 || sess[0].State != "idle" {
		t.Fatalf("Sessions of an AdminDown peer = %+v, want one idle", sess)
	}

	ctx := context.Background()
	if err := s.SetPassword(ctx, routerAddr, "first"); err != nil {
		t.Fatalf("SetPassword(first): %v", err)
	}
	want := map[string]route{"198.51.100.7/32": {NextHop: node.String()}}
	router.waitRIB(t, want)

	router.setRouterPassword(t, node, "second")
	router.waitRIB(t, map[string]route{}) // the old session is gone
	if err := s.SetPassword(ctx, routerAddr, "second"); err != nil {
		t.Fatalf("SetPassword(second): %v", err)
	}
	router.waitSession(t, api.PeerState_ESTABLISHED)
	router.waitRIB(t, want)

	if err := s.SetPassword(ctx, netip.MustParseAddr("192.0.2.99"), "x"); err == nil {
		t.Error("SetPassword of an unknown peer succeeded")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.SetPassword(ctx, routerAddr, "third"); !errors.Is(err, ErrClosed) {
		t.Errorf("SetPassword after Close = %v, want ErrClosed", err)
	}
}
