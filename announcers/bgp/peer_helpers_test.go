// Go 1.24+ listens with MPTCP by default, and the kernel refuses TCP_MD5SIG
// on MPTCP sockets, so the test routers' listeners could not use passwords.
//go:debug multipathtcp=0

package bgp

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	api "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/apiutil"
	"github.com/osrg/gobgp/v3/pkg/packet/bgp"
	"github.com/osrg/gobgp/v3/pkg/server"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/test/harness"
)

// loopbackSeq hands every test its own 127.0.x.y addresses, so that no
// test sees a session of another. Tests do not run in parallel: GoBGP v3's
// StartBgp writes package-level route selection globals that every server
// in the process reads, which the race detector reports.
var loopbackSeq atomic.Uint32

func nextLoopback() netip.Addr {
	n := loopbackSeq.Add(1)
	return netip.AddrFrom4([4]byte{127, 0, byte(1 + n/250), byte(1 + n%250)})
}

// testPeer is a second, independent GoBGP server acting as the router: it
// listens on addr and accepts the speaker's session passively.
type testPeer struct {
	srv  *server.BgpServer
	addr netip.Addr
	port int
}

// newTestPeer starts a router with AS asn on addr that accepts a session
// from speakerAddr with AS speakerASN.
func newTestPeer(t *testing.T, addr netip.Addr, asn uint32, speakerAddr netip.Addr, speakerASN uint32) *testPeer {
	t.Helper()
	return newTestPeerAuth(t, addr, asn, speakerAddr, speakerASN, "")
}

// newTestPeerAuth is newTestPeer with a TCP MD5 password.
func newTestPeerAuth(t *testing.T, addr netip.Addr, asn uint32, speakerAddr netip.Addr, speakerASN uint32, password string) *testPeer {
	t.Helper()
	return startTestPeer(t, addr, asn, speakerAddr, speakerASN, password, false)
}

// newTestPeerGR is newTestPeer acting as a graceful restart helper.
func newTestPeerGR(t *testing.T, addr netip.Addr, asn uint32, speakerAddr netip.Addr, speakerASN uint32) *testPeer {
	t.Helper()
	return startTestPeer(t, addr, asn, speakerAddr, speakerASN, "", true)
}

func startTestPeer(t *testing.T, addr netip.Addr, asn uint32, speakerAddr netip.Addr, speakerASN uint32, password string, grHelper bool) *testPeer {
	t.Helper()
	ctx := context.Background()
	port := harness.FreePort(t, addr)
	srv := server.NewBgpServer(server.LoggerOption(slogAdapter{testLog}))
	go srv.Serve()
	t.Cleanup(func() {
		if err := shutdown(context.Background(), srv, nil); err != nil {
			t.Errorf("stopping test peer: %v", err)
		}
	})
	rid := "10.255.255.1"
	err := srv.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
		Asn: asn, RouterId: rid, ListenPort: int32(port), ListenAddresses: []string{addr.String()},
	}})
	if err != nil {
		t.Fatalf("starting test peer: %v", err)
	}
	var fams []*api.AfiSafi
	for _, f := range []*api.Family{familyIPv4, familyIPv6} {
		as := &api.AfiSafi{Config: &api.AfiSafiConfig{Family: f, Enabled: true}}
		if grHelper {
			as.MpGracefulRestart = &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: true}}
		}
		fams = append(fams, as)
	}
	var gr *api.GracefulRestart
	if grHelper {
		gr = &api.GracefulRestart{Enabled: true, HelperOnly: true}
	}
	err = srv.AddPeer(ctx, &api.AddPeerRequest{Peer: &api.Peer{
		GracefulRestart: gr,
		Conf:            &api.PeerConf{NeighborAddress: speakerAddr.String(), PeerAsn: speakerASN, AuthPassword: password},
		Transport:       &api.Transport{PassiveMode: true},
		// GoBGP's default keeps a reset session idle for 30 s.
		Timers:   &api.Timers{Config: &api.TimersConfig{IdleHoldTimeAfterReset: 1}},
		AfiSafis: fams,
	}})
	if err != nil {
		t.Fatalf("adding speaker to test peer: %v", err)
	}
	return &testPeer{srv: srv, addr: addr, port: port}
}

// route is what the test peer holds for one prefix.
type route struct {
	NextHop     string
	Communities []string
	LocalPref   uint32
}

// rib returns the peer's routes for both families, keyed by prefix.
func (p *testPeer) rib(t *testing.T) map[string]route {
	t.Helper()
	out := map[string]route{}
	for _, f := range []*api.Family{familyIPv4, familyIPv6} {
		err := p.srv.ListPath(context.Background(), &api.ListPathRequest{TableType: api.TableType_GLOBAL, Family: f},
			func(d *api.Destination) {
				for _, path := range d.Paths {
					nlri, err := apiutil.GetNativeNlri(path)
					if err != nil {
						t.Errorf("decoding nlri: %v", err)
						continue
					}
					attrs, err := apiutil.GetNativePathAttributes(path)
					if err != nil {
						t.Errorf("decoding attributes: %v", err)
						continue
					}
					var r route
					for _, a := range attrs {
						switch a := a.(type) {
						case *bgp.PathAttributeNextHop:
							r.NextHop = a.Value.String()
						case *bgp.PathAttributeMpReachNLRI:
							r.NextHop = a.Nexthop.String()
						case *bgp.PathAttributeLocalPref:
							r.LocalPref = a.Value
						case *bgp.PathAttributeCommunities:
							for _, c := range a.Value {
								r.Communities = append(r.Communities, fmt.Sprintf("%d:%d", c>>16, c&0xffff))
							}
							sort.Strings(r.Communities)
						}
					}
					out[nlri.String()] = r
				}
			})
		if err != nil {
			t.Fatalf("listing test peer rib: %v", err)
		}
	}
	return out
}

// waitRIB polls the peer's RIB until it equals want, or fails with the
// last difference after a generous deadline.
func (p *testPeer) waitRIB(t *testing.T, want map[string]route) {
	t.Helper()
	harness.Poll(t, time.Minute, func() error {
		if d := cmp.Diff(want, p.rib(t)); d != "" {
			return fmt.Errorf("peer %s rib (-want +got):\n%s", p.addr, d)
		}
		return nil
	})
}

// session returns the peer's view of its session with the speaker.
func (p *testPeer) session(t *testing.T) *api.PeerState {
	t.Helper()
	var st *api.PeerState
	err := p.srv.ListPeer(context.Background(), &api.ListPeerRequest{}, func(x *api.Peer) { st = x.GetState() })
	if err != nil {
		t.Fatalf("listing test peer's peers: %v", err)
	}
	return st
}

func (p *testPeer) waitSession(t *testing.T, want api.PeerState_SessionState) {
	t.Helper()
	harness.Poll(t, time.Minute, func() error {
		if got := p.session(t).GetSessionState(); got != want {
			return fmt.Errorf("peer %s session state %v, want %v", p.addr, got, want)
		}
		return nil
	})
}

// peerConf is the speaker-side Peer for p, dialled from src.
func (p *testPeer) peerConf(asn uint32, src netip.Addr) Peer {
	return Peer{Address: p.addr, ASN: asn, Port: uint16(p.port), SourceAddress: src, HoldTime: 9 * time.Second, ConnectRetry: time.Second}
}

func newSpeaker(t *testing.T, cfg Config) *Speaker {
	t.Helper()
	s, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func announce(t *testing.T, s *Speaker, addrs ...string) {
	t.Helper()
	set := make([]model.Announcement, 0, len(addrs))
	for _, a := range addrs {
		set = append(set, model.Announcement{Addr: netip.MustParseAddr(a), Service: model.ServiceKey{}})
	}
	if err := s.Announce(context.Background(), set); err != nil {
		t.Fatalf("Announce(%v): %v", addrs, err)
	}
}

var testLog = slog.New(slog.DiscardHandler)
