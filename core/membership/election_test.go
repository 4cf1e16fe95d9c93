package membership_test

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/switchyard-lb/switchyard/core/election"
	"github.com/switchyard-lb/switchyard/core/membership"
)

// TestElectionMovesAddressOffKilledMember runs the real election over
// each survivor's gossip view: Kubernetes still says every node is
// Ready, yet the address owned by a killed daemon moves, and every
// survivor agrees where.
func TestElectionMovesAddressOffKilledMember(t *testing.T) {
	ms := cluster(t, 3)
	candidates := func() []election.Candidate {
		var out []election.Candidate
		for i := range ms {
			out = append(out, election.Candidate{Name: name(i), Ready: true})
		}
		return out
	}
	input := func(m *membership.Membership) *election.Input {
		return &election.Input{Nodes: candidates(), Alive: m.Alive}
	}
	ip := netip.MustParseAddr("192.0.2.10")

	owner, ok := election.Layer2Owner(input(ms[0]), ip)
	if !ok {
		t.Fatal("no owner with every member alive")
	}
	// The runner-up: the owner among the others.
	runnerUp, _ := election.Layer2Owner(&election.Input{Nodes: slices.DeleteFunc(candidates(), func(c election.Candidate) bool { return c.Name == owner })}, ip)
	for i, m := range ms {
		if o, _ := election.Layer2Owner(input(m), ip); o != owner {
			t.Fatalf("%s elects %q, node-0 elects %q", name(i), o, owner)
		}
	}
	var victim int
	if _, err := fmt.Sscanf(owner, "node-%d", &victim); err != nil {
		t.Fatalf("owner %q: %v", owner, err)
	}
	killed := time.Now()
	if err := ms[victim].Crash(); err != nil {
		t.Fatal(err)
	}
	for i, m := range ms {
		if i == victim {
			continue
		}
		eventually(t, fmt.Sprintf("%s moves %s off %s", name(i), ip, owner), func() bool {
			o, ok := election.Layer2Owner(input(m), ip)
			return ok && o != owner
		})
		t.Logf("%s: %s moved off %s after %v", name(i), ip, owner, time.Since(killed))
		// The next in the ranking takes over: the same answer everywhere.
		if o, _ := election.Layer2Owner(input(m), ip); o != runnerUp {
			t.Errorf("%s elects %q, want the runner-up %q", name(i), o, runnerUp)
		}
	}
}
