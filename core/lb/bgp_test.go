package lb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"

	"github.com/switchyard-lb/switchyard/announcers/bgp"
	"github.com/switchyard-lb/switchyard/announcers/bgp/bfd"
	"github.com/switchyard-lb/switchyard/announcers/bgp/bfd/bfdtest"
	"github.com/switchyard-lb/switchyard/core/config"
	"github.com/switchyard-lb/switchyard/test/harness"
)

func TestDaemonNamespace(t *testing.T) {
	file := func(content string, err error) func(string) ([]byte, error) {
		return func(path string) ([]byte, error) {
			if path != namespaceFile {
				return nil, fmt.Errorf("read %s, want %s", path, namespaceFile)
			}
			return []byte(content), err
		}
	}
	tests := []struct {
		name string
		env  string
		read func(string) ([]byte, error)
		want string
	}{
		{"POD_NAMESPACE first", "lb-system", file("other\n", nil), "lb-system"},
		{"then the service account's file", "", file("other\n", nil), "other"},
		{"then the default", "", file("", errors.New("no such file")), "switchyard-system"},
		{"a blank file is no namespace", " ", file(" \n", nil), "switchyard-system"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := DaemonNamespace(tt.env, tt.read); got != tt.want {
				t.Errorf("DaemonNamespace = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSecretPassword(t *testing.T) {
	ref := config.SecretKeyRef{Name: "bgp", Key: "password"}
	secret := func(data map[string]string) *corev1.Secret {
		s := &corev1.Secret{Data: map[string][]byte{}}
		for k, v := range data {
			s.Data[k] = []byte(v)
		}
		return s
	}
	tests := []struct {
		name    string
		secret  *corev1.Secret
		want    string
		wantErr string
	}{
		{name: "trailing newline trimmed", secret: secret(map[string]string{"password": "s3cret\n"}), want: "s3cret"},
		{name: "missing Secret", secret: nil, wantErr: "password Secret ns/bgp not found"},
		{name: "missing key", secret: secret(map[string]string{"pw": "x"}), wantErr: `password Secret ns/bgp has no key "password"`},
		{name: "empty key", secret: secret(map[string]string{"password": " \n"}), wantErr: `password Secret ns/bgp: key "password" is empty`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := secretPassword("ns", ref, tt.secret)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if got != tt.want || gotErr != tt.wantErr {
				t.Errorf("secretPassword = %q, %q; want %q, %q", got, gotErr, tt.want, tt.wantErr)
			}
		})
	}
}

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
