package lb

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/switchyard-lb/switchyard/announcers/bgp"
	"github.com/switchyard-lb/switchyard/announcers/bgp/bfd"
	"github.com/switchyard-lb/switchyard/announcers/bgp/bfd/bfdtest"
	"github.com/switchyard-lb/switchyard/test/harness"
)

type collectFunc func(chan<- prometheus.Metric)

func (collectFunc) Describe(chan<- *prometheus.Desc)      {}
func (f collectFunc) Collect(ch chan<- prometheus.Metric) { f(ch) }

// TestBFDMetricsAndState: a speaker's BFD session, Up with a peer on the
// fake network, shows in the metrics and in /debug/state.
func TestBFDMetricsAndState(t *testing.T) {
	node, router := netip.MustParseAddr("127.0.9.1"), netip.MustParseAddr("127.0.9.2")
	n := bfdtest.NewNetwork()
	rsrv := bfd.NewServer(n.Endpoint(router), bfd.Options{})
	// 3 s detection, so that a loaded machine does not flap the session
	// (downs_total is asserted 0).
	timers := bfd.Timers{DesiredMinTx: 300 * time.Millisecond, RequiredMinRx: 300 * time.Millisecond, DetectMult: 10}
	if err := rsrv.Add(bfd.Peer{Addr: node, Timers: timers}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { rsrv.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	s, err := bgp.New(context.Background(), bgp.Config{Name: "tor", LocalASN: 64512, RouterID: netip.MustParseAddr("10.0.0.11"),
		Peers: []bgp.Peer{{Address: router, ASN: 64513, Port: 1, BFD: &bgp.BFD{MinRx: 300 * time.Millisecond, MinTx: 300 * time.Millisecond, Multiplier: 10}}}},
		nil, bgp.WithBFDTransport(n.Endpoint(node)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	harness.Poll(t, time.Minute, func() error {
		if ss := s.BFDSessions(); len(ss) != 1 || ss[0].State != bfd.Up {
			return fmt.Errorf("BFD sessions %+v, want one up", ss)
		}
		return nil
	})

	want := `
# HELP switchyard_bfd_bgp_held_down 1 while the BGP session with the peer is held down by a BFD failure.
# TYPE switchyard_bfd_bgp_held_down gauge
switchyard_bfd_bgp_held_down{announcer="tor",peer="127.0.9.2"} 0
# HELP switchyard_bfd_session_downs_total Times the BFD session with the BGP peer went from up to down.
# TYPE switchyard_bfd_session_downs_total counter
switchyard_bfd_session_downs_total{announcer="tor",peer="127.0.9.2"} 0
# HELP switchyard_bfd_session_state 1 for the BFD session's current state (admindown, down, init, up).
# TYPE switchyard_bfd_session_state gauge
switchyard_bfd_session_state{announcer="tor",peer="127.0.9.2",state="admindown"} 0
switchyard_bfd_session_state{announcer="tor",peer="127.0.9.2",state="down"} 0
switchyard_bfd_session_state{announcer="tor",peer="127.0.9.2",state="init"} 0
switchyard_bfd_session_state{announcer="tor",peer="127.0.9.2",state="up"} 1
# HELP switchyard_bfd_session_up 1 when the BFD session with the BGP peer is up.
# TYPE switchyard_bfd_session_up gauge
switchyard_bfd_session_up{announcer="tor",peer="127.0.9.2"} 1
`
	if err := testutil.CollectAndCompare(collectFunc(func(ch chan<- prometheus.Metric) { collectBFD(s, ch) }), strings.NewReader(want)); err != nil {
		t.Error(err)
	}

	b, err := json.Marshal(bgpState(s))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		BFD []map[string]any `json:"bfd"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.BFD) != 1 || got.BFD[0]["peer"] != "127.0.9.2" || got.BFD[0]["state"] != "up" || got.BFD[0]["remoteState"] != "up" ||
		got.BFD[0]["txInterval"] != "300ms" || got.BFD[0]["detectionTime"] != "3s" {
		t.Errorf("/debug/state part %s, want one up session at 300ms, detection 3s", b)
	}
}
