package membership_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/membership"
	"github.com/switchyard-lb/switchyard/test/harness"
)

func withGrace(d time.Duration) option {
	return func(c *membership.Config) { c.RestartGrace = d }
}

// TestRestartGrace: how the others judge a member that stops, by how it
// stopped and their restart grace. Only a member that said it restarts
// is held alive, and only for the grace; one that crashed is dead after
// the guard's fence (600ms here) whatever the grace, and one that left
// for good, or restarted with no grace, has left.
func TestRestartGrace(t *testing.T) {
	restart := func(ctx context.Context, m *membership.Membership) error { return m.CloseForRestart(ctx) }
	leave := func(ctx context.Context, m *membership.Membership) error { return m.Close(ctx) }
	crash := func(_ context.Context, m *membership.Membership) error { return m.Crash() }
	tests := []struct {
		name  string
		grace time.Duration
		stop  func(context.Context, *membership.Membership) error
		// state is what the others record; held, whether they still
		// report it alive well after the fence.
		state string
		held  bool
	}{
		{"restart within the grace", time.Hour, restart, "restarting", true},
		{"restart past the grace", 300 * time.Millisecond, restart, "restarting", false},
		{"restart without a grace", 0, restart, "left", false},
		{"leave for good", time.Hour, leave, "left", false},
		{"crash", time.Hour, crash, "dead", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ms := cluster(t, 3, withGrace(tt.grace))
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			if err := tt.stop(ctx, ms[2]); err != nil {
				t.Fatal(err)
			}
			for i, m := range ms[:2] {
				harness.Poll(t, deadline, harness.Cond(fmt.Sprintf("%s sees node-2 %s", name(i), tt.state), func() bool { return states(m)["node-2"] == tt.state }))
			}
			if !tt.held {
				for i, m := range ms[:2] {
					harness.Poll(t, deadline, harness.Cond(fmt.Sprintf("%s reports node-2 not alive", name(i)), func() bool {
						alive, _ := m.Alive("node-2")
						return !alive
					}))
				}
				return
			}
			// Held: recorded restarting, and alive to both, throughout a
			// second and a half, well past the fence. A member that counts
			// itself cut off for a moment (no packet from the other within
			// the guard's window: a loaded machine) abstains on every node;
			// that is the guard, not node-2 dropped, so such a sample
			// asserts the record only. Each must answer with its quorum
			// at least once after the window.
			for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
				for i, m := range ms[:2] {
					if st := states(m)["node-2"]; st != "restarting" {
						t.Fatalf("%s records node-2 %q while it restarts; want restarting", name(i), st)
					}
					if !m.HasQuorum() {
						continue
					}
					if alive, known := m.Alive("node-2"); !alive || !known {
						t.Fatalf("%s: Alive(node-2) = %v, %v while it restarts; want true, true", name(i), alive, known)
					}
				}
			}
			for i, m := range ms[:2] {
				harness.Poll(t, deadline, harness.Cond(fmt.Sprintf("%s, with its quorum, reports node-2 alive", name(i)), func() bool {
					alive, known := m.Alive("node-2")
					return m.HasQuorum() && alive && known
				}))
			}
		})
	}
}

// TestRestartedMemberRejoins: a member held while it restarts is alive
// again to everyone once back, under the same name and address.
func TestRestartedMemberRejoins(t *testing.T) {
	ms := cluster(t, 3, withGrace(time.Hour))
	port := ms[2].LocalAddr().Port()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	if err := ms[2].CloseForRestart(ctx); err != nil {
		t.Fatal(err)
	}
	for i, m := range ms[:2] {
		harness.Poll(t, deadline, harness.Cond(fmt.Sprintf("%s sees node-2 restarting", name(i)), func() bool { return states(m)["node-2"] == "restarting" }))
	}
	again := start(t, 2, withGrace(time.Hour), func(c *membership.Config) { c.BindPort = int(port) })
	again.SetPeers(peersOf(ms[0], ms[1]))
	all := map[string]string{"node-0": "alive", "node-1": "alive", "node-2": "alive"}
	for i, m := range append(ms[:2], again) {
		harness.Poll(t, deadline, harness.Cond(fmt.Sprintf("%s sees all three alive", name(i)), func() bool { return cmp.Equal(all, states(m)) }))
	}
}
