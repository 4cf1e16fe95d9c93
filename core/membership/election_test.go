package membership_test

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/switchyard-lb/switchyard/core/election"
	"github.com/switchyard-lb/switchyard/core/membership"
	"github.com/switchyard-lb/switchyard/test/harness"
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

	var owner string
	harness.Poll(t, deadline, harness.Cond("an owner with every member alive", func() bool {
		o, ok := election.Layer2Owner(input(ms[0]), ip)
		owner = o
		return ok
	}))
	// The runner-up: the owner among the others.
	runnerUp, _ := election.Layer2Owner(&election.Input{Nodes: slices.DeleteFunc(candidates(), func(c election.Candidate) bool { return c.Name == owner })}, ip)
	for i, m := range ms {
		// Awaited: a loaded machine may leave a member cut off for a
		// moment, abstaining.
		harness.Poll(t, deadline, func() error {
			if o, _ := election.Layer2Owner(input(m), ip); o != owner {
				return fmt.Errorf("%s elects %q, node-0 elects %q", name(i), o, owner)
			}
			return nil
		})
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
		// The next in the ranking takes over: the same answer everywhere.
		harness.Poll(t, deadline, harness.Cond(fmt.Sprintf("%s moves %s off %s to the runner-up %s", name(i), ip, owner, runnerUp), func() bool {
			o, ok := election.Layer2Owner(input(m), ip)
			return ok && o == runnerUp
		}))
		t.Logf("%s: %s moved off %s after %v", name(i), ip, owner, time.Since(killed))
	}
}

// TestCutOffMemberAnnouncesNothing: the real election over a member's
// gossip view when it hears no other member. From its side a partition
// and the death of every other member look alike, while the others, if
// alive, have a majority and move its addresses: so it answers for no
// layer-2 address (before, it fell back to Kubernetes readiness, which
// still said Ready, and kept them: two owners). It keeps its BGP routes.
// Once Kubernetes marks the silent nodes NotReady they are gone for good
// and, after a window, it owns every address.
func TestCutOffMemberAnnouncesNothing(t *testing.T) {
	ms := cluster(t, 3)
	input := func(m *membership.Membership) *election.Input {
		var nodes []election.Candidate
		for i := range ms {
			nodes = append(nodes, election.Candidate{Name: name(i), Ready: true})
		}
		return &election.Input{Nodes: nodes, Alive: m.Alive}
	}
	// An address node-2 owns while all three are alive.
	var ip netip.Addr
	for i := range 256 {
		ip = netip.AddrFrom4([4]byte{192, 0, 2, byte(i)})
		if o, _ := election.Layer2Owner(input(ms[2]), ip); o == name(2) {
			break
		}
	}
	ips := []netip.Addr{ip}
	if got := election.Announced(election.Layer2, name(2), input(ms[2]), ips); len(got) != 1 {
		t.Fatalf("node-2 announces %v with all alive, want %s", got, ip)
	}
	for _, m := range ms[:2] {
		if err := m.Crash(); err != nil {
			t.Fatal(err)
		}
	}
	harness.Poll(t, deadline, harness.Cond("node-2 stops announcing "+ip.String(), func() bool {
		return len(election.Announced(election.Layer2, name(2), input(ms[2]), ips)) == 0
	}))
	harness.Poll(t, deadline, harness.Cond("node-2 sees both others dead", func() bool {
		st := states(ms[2])
		return st["node-0"] == "dead" && st["node-1"] == "dead"
	}))
	if !ms[2].CutOff() {
		t.Error("node-2 does not report itself cut off")
	}
	if got := election.Announced(election.Layer2, name(2), input(ms[2]), ips); got != nil {
		t.Errorf("node-2 announces %v by layer 2 while it hears nobody", got)
	}
	if got := election.Announced(election.BGP, name(2), input(ms[2]), ips); len(got) != 1 {
		t.Errorf("node-2 announces %v by BGP while it hears nobody, want %s", got, ip)
	}
	// Kubernetes confirms: the two nodes are NotReady.
	ms[2].SetPeers([]membership.Peer{{Name: name(0), Addr: addr(0), NotReady: true}, {Name: name(1), Addr: addr(1), NotReady: true}})
	if ms[2].CutOff() || !ms[2].HasQuorum() {
		t.Errorf("node-2: cut off %v, quorum %v once the others are NotReady; want false, true", ms[2].CutOff(), ms[2].HasQuorum())
	}
	// It answers again after the window it waits once no longer cut off.
	harness.Poll(t, deadline, harness.Cond("node-2 announces "+ip.String()+" once the others are NotReady", func() bool {
		return len(election.Announced(election.Layer2, name(2), input(ms[2]), ips)) == 1
	}))
}
