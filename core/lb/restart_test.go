package lb

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/switchyard-lb/switchyard/core/config"
	"github.com/switchyard-lb/switchyard/core/election"
	"github.com/switchyard-lb/switchyard/core/membership"
	"github.com/switchyard-lb/switchyard/core/model"
)

// TestManagerCloseLeavesGossip: Close leaves gossip saying the daemon
// restarts when its Node says it restarts and the config has a restart
// grace, so that another daemon (with a grace too) holds it; it leaves
// for good when the node is going away or without a grace.
func TestManagerCloseLeavesGossip(t *testing.T) {
	tests := []struct {
		name  string
		node  model.Node
		grace time.Duration
		want  string // what the other daemon records
	}{
		{"restart", model.Node{Ready: true}, time.Hour, "restarting"},
		{"restart without a grace", model.Node{Ready: true}, 0, "left"},
		{"cordoned", model.Node{Ready: true, Unschedulable: true}, time.Hour, "left"},
		{"being deleted", model.Node{Ready: true, Deleting: true}, time.Hour, "left"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			grace := config.Duration(tt.grace)
			typ := Type{Mode: election.Layer2, New: func(context.Context, Env, config.Announcer) (*Instance, error) {
				return &Instance{Announcer: &serialAnnouncer{t: t}}, nil
			}}
			m, err := New(t.Context(), Config{
				Client: fake.NewClientset(), NodeName: "n1", Namespace: "ns", Types: Types{"recording": typ},
				Registerer: prometheus.NewRegistry(), Trigger: func() {}, Log: discard(),
			}, &config.Config{
				Announcers: []config.Announcer{{Name: "rec", Type: "recording"}},
				Membership: config.Membership{BindAddress: "127.0.0.1", Port: -1, RestartGrace: &grace},
			})
			if err != nil {
				t.Fatal(err)
			}
			other, err := membership.New(membership.Config{NodeName: "n2", BindAddr: "127.0.0.1", BindPort: -1, RestartGrace: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan struct{})
			go func() { defer close(done); _ = other.Run(ctx) }()
			defer func() { _ = other.Close(context.Background()); cancel(); <-done }()
			other.SetPeers([]membership.Peer{{Name: "n1", Addr: m.members.LocalAddr().String()}})
			wait(t, "n2 sees n1 alive", func() bool { return state(other, "n1") == "alive" })

			tt.node.Name = "n1"
			m.SetNodes(map[string]*model.Node{"n1": &tt.node})
			if err := m.Close(); err != nil {
				t.Fatal(err)
			}
			wait(t, "n2 sees n1 "+tt.want, func() bool { return state(other, "n1") == tt.want })
		})
	}
}

func state(m *membership.Membership, node string) string {
	for _, mem := range m.Members() {
		if mem.Name == node {
			return mem.State.String()
		}
	}
	return ""
}

// wait polls cond for up to 20 s, a bound for failures on a loaded
// machine.
func wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s: not within 20s", what)
		}
	}
}
