package membership_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/election"
	"github.com/switchyard-lb/switchyard/core/membership"
	"github.com/switchyard-lb/switchyard/test/harness"
)

// Membership serves the election directly.
var _ election.AliveFunc = (*membership.Membership)(nil).Alive

func TestJoin(t *testing.T) {
	ms := cluster(t, 3)
	want := map[string]string{"node-0": "alive", "node-1": "alive", "node-2": "alive"}
	for i, m := range ms {
		if diff := cmp.Diff(want, states(m)); diff != "" {
			t.Errorf("%s: members (-want +got):\n%s", name(i), diff)
		}
		wantView := map[string]string{
			"node-0": "alive=true known=true", "node-1": "alive=true known=true",
			"node-2": "alive=true known=true", "node-9": "alive=false known=false",
		}
		// Awaited, not read once: on a loaded machine a member may count
		// itself cut off for a moment (TestQuorumGuard).
		harness.Poll(t, deadline, func() error {
			if diff := cmp.Diff(wantView, view(m, "node-0", "node-1", "node-2", "node-9")); diff != "" {
				return fmt.Errorf("%s: Alive (-want +got):\n%s", name(i), diff)
			}
			return nil
		})
		select {
		case <-m.Changes():
		default:
			t.Errorf("%s: no change notified after joining", name(i))
		}
	}
	for i, m := range ms {
		if err := m.JoinErr(); err != nil {
			t.Errorf("%s: JoinErr = %v", name(i), err)
		}
	}
}

// TestDeadDetected kills a member without leaving and measures how long
// each survivor takes to declare it dead. The time is reported, never
// asserted: it depends on the machine.
func TestDeadDetected(t *testing.T) {
	ms := cluster(t, 4)
	victim := ms[3]
	for _, m := range ms[:3] {
		drain(m.Changes())
	}
	killed := time.Now()
	if err := victim.Crash(); err != nil {
		t.Fatal(err)
	}
	var times []time.Duration
	for i, m := range ms[:3] {
		harness.Poll(t, deadline, harness.Cond(fmt.Sprintf("%s sees node-3 dead", name(i)), func() bool {
			alive, known := m.Alive("node-3")
			return known && !alive
		}))
		times = append(times, time.Since(killed))
	}
	// Polling one survivor after the other only overstates the later
	// ones; the first is accurate to the poll period.
	t.Logf("dead member detected after %v (first survivor polled), all three by %v", times[0], slices.Max(times))
	for i, m := range ms[:3] {
		select {
		case <-m.Changes():
		default:
			t.Errorf("%s: no change notified for the death", name(i))
		}
		want := map[string]string{"node-0": "alive", "node-1": "alive", "node-2": "alive", "node-3": "dead"}
		if diff := cmp.Diff(want, states(m)); diff != "" {
			t.Errorf("%s: members (-want +got):\n%s", name(i), diff)
		}
		if got := m.Size(); got != 3 {
			t.Errorf("%s: Size = %d, want 3", name(i), got)
		}
	}
}

func drain(c <-chan struct{}) {
	select {
	case <-c:
	default:
	}
}

func TestGracefulLeave(t *testing.T) {
	ms := cluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	if err := ms[2].Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for i, m := range ms[:2] {
		harness.Poll(t, deadline, harness.Cond(fmt.Sprintf("%s sees node-2 left", name(i)), func() bool { return states(m)["node-2"] == "left" }))
		if alive, known := m.Alive("node-2"); alive || !known {
			t.Errorf("%s: Alive(node-2) = %v, %v; want false, true", name(i), alive, known)
		}
		// Leaving does not cost the others their quorum.
		if !m.HasQuorum() {
			t.Errorf("%s: lost quorum after a graceful leave", name(i))
		}
	}
	if err := ms[2].Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestRejoinAfterRestart(t *testing.T) {
	ms := cluster(t, 3)
	port := ms[2].LocalAddr().Port()
	if err := ms[2].Crash(); err != nil {
		t.Fatal(err)
	}
	for i, m := range ms[:2] {
		harness.Poll(t, deadline, harness.Cond(fmt.Sprintf("%s sees node-2 dead", name(i)), func() bool { return states(m)["node-2"] == "dead" }))
	}
	// The daemon restarts on the same node: same name, same address.
	again := start(t, 2, func(c *membership.Config) { c.BindPort = int(port) })
	again.SetPeers(peersOf(ms[0], ms[1]))
	for i, m := range append(ms[:2], again) {
		harness.Poll(t, deadline, harness.Cond(fmt.Sprintf("%s sees all three alive", name(i)), func() bool {
			return cmp.Equal(map[string]string{"node-0": "alive", "node-1": "alive", "node-2": "alive"}, states(m))
		}))
	}
}

// TestPeersRejoinAndForget: a member that is only told about peers joins
// them; peers gone from Kubernetes are forgotten once dead.
func TestPeersRejoinAndForget(t *testing.T) {
	ms := cluster(t, 4)
	if err := ms[3].Crash(); err != nil {
		t.Fatal(err)
	}
	harness.Poll(t, deadline, harness.Cond("node-0 sees node-3 dead", func() bool { return states(ms[0])["node-3"] == "dead" }))
	// node-3 still exists in Kubernetes: still known, and dead once its
	// fence ended.
	ms[0].SetPeers(peersOf(ms[1], ms[2], ms[3]))
	harness.Poll(t, deadline, harness.Cond("node-0 reports node-3 dead after the fence", func() bool {
		return cmp.Equal(map[string]string{"node-3": "alive=false known=true"}, view(ms[0], "node-3"))
	}))
	// node-3 is deleted from Kubernetes: forgotten.
	ms[0].SetPeers(peersOf(ms[1], ms[2]))
	harness.Poll(t, deadline, func() error {
		if diff := cmp.Diff(map[string]string{"node-1": "alive=true known=true", "node-3": "alive=false known=false"},
			view(ms[0], "node-1", "node-3")); diff != "" {
			return fmt.Errorf("after node-3 left the peer list, Alive (-want +got):\n%s", diff)
		}
		return nil
	})
}

// TestQuorumGuard: with two of four members dead, no survivor sees a
// majority; a guarded one abstains (exactly half: no opinion at all),
// an unguarded one trusts its view. The guarded views are awaited, not
// read once: on a loaded machine a member may count itself cut off for
// a moment (no packet from the other survivor within the window).
func TestQuorumGuard(t *testing.T) {
	ms := make([]*membership.Membership, 4)
	for i := range ms {
		ms[i] = start(t, i, func(c *membership.Config) { c.DisableQuorumGuard = i == 1 })
	}
	for _, m := range ms[1:] {
		m.SetPeers(peersOf(ms[0]))
	}
	for i, m := range ms {
		harness.Poll(t, deadline, harness.Cond(fmt.Sprintf("%s sees 4 alive", name(i)), func() bool { return m.Size() == 4 }))
	}
	for _, m := range ms[2:] {
		if err := m.Crash(); err != nil {
			t.Fatal(err)
		}
	}
	for i, m := range ms[:2] {
		harness.Poll(t, deadline, harness.Cond(fmt.Sprintf("%s sees two dead", name(i)), func() bool { return m.Size() == 2 && len(m.Members()) == 4 }))
		if m.HasQuorum() {
			t.Errorf("%s: HasQuorum with 2 of 4 alive", name(i))
		}
	}
	names := []string{"node-0", "node-2"}
	harness.Poll(t, deadline, harness.Cond("the guarded member has no opinion", func() bool {
		return cmp.Equal(map[string]string{"node-0": "alive=false known=false", "node-2": "alive=false known=false"}, view(ms[0], names...))
	}))
	if diff := cmp.Diff(map[string]string{"node-0": "alive=true known=true", "node-2": "alive=false known=true"},
		view(ms[1], names...)); diff != "" {
		t.Errorf("unguarded member (-want +got):\n%s", diff)
	}
	// The dead nodes are deleted from Kubernetes: forgetting them gives
	// the guarded member its majority back (2 of 2) at once.
	ms[0].SetPeers(peersOf(ms[1]))
	if !ms[0].HasQuorum() {
		t.Errorf("node-0: no quorum after forgetting the dead members")
	}
	harness.Poll(t, deadline, harness.Cond("the guarded member trusts gossip again", func() bool {
		return cmp.Equal(map[string]string{"node-0": "alive=true known=true", "node-2": "alive=false known=false"}, view(ms[0], names...))
	}))
}

func TestEncryption(t *testing.T) {
	key := []byte("0123456789abcdef")
	other := []byte("fedcba9876543210")
	withKeys := func(keys ...[]byte) option { return func(c *membership.Config) { c.Keys = keys } }
	a := start(t, 0, withKeys(key))
	b := start(t, 1, withKeys(key, other)) // rotating: encrypts with key, accepts other too
	c := start(t, 2, withKeys(other))
	b.SetPeers(peersOf(a))
	harness.Poll(t, deadline, harness.Cond("a and b joined with a shared key", func() bool { return a.Size() == 2 && b.Size() == 2 }))
	c.SetPeers(peersOf(a))
	harness.Poll(t, deadline, harness.Cond("c fails to join a with a key a lacks", func() bool { return c.JoinErr() != nil }))
	if got := c.Size(); got != 1 {
		t.Errorf("c's Size = %d, want 1 (alone)", got)
	}
	if _, known := a.Alive("node-2"); known {
		t.Error("a knows c although c gossips with a key a lacks")
	}
	// A member gossiping in clear is refused by an encrypted one too.
	d := start(t, 3)
	d.SetPeers(peersOf(a))
	harness.Poll(t, deadline, harness.Cond("d fails to join a without a key", func() bool { return d.JoinErr() != nil }))
	if got := d.Size(); got != 1 {
		t.Errorf("d's Size = %d, want 1 (alone)", got)
	}
	if _, known := a.Alive("node-3"); known {
		t.Error("a knows d although d gossips in clear")
	}
	if _, err := membership.New(membership.Config{NodeName: "x", BindAddr: addr(4), BindPort: -1, Keys: [][]byte{[]byte("short")}}); err == nil {
		t.Error("New accepted a 5-byte key")
	}
}

// TestSetKeys rotates the key of a running cluster the documented way
// (add the new key second, then first, then drop the old one): the two
// members stay joined throughout, a newcomer with only the new key joins,
// and one with only the old key is refused.
func TestSetKeys(t *testing.T) {
	oldKey := []byte("0123456789abcdef")
	newKey := []byte("0123456789abcdef0123456789abcdef")
	withKeys := func(keys ...[]byte) option { return func(c *membership.Config) { c.Keys = keys } }
	a := start(t, 0, withKeys(oldKey))
	b := start(t, 1, withKeys(oldKey))
	b.SetPeers(peersOf(a))
	harness.Poll(t, deadline, harness.Cond("a and b joined", func() bool { return a.Size() == 2 && b.Size() == 2 }))

	for _, step := range [][][]byte{{oldKey, newKey}, {newKey, oldKey}, {newKey}} {
		for _, m := range []*membership.Membership{a, b} {
			if err := m.SetKeys(step); err != nil {
				t.Fatalf("SetKeys: %v", err)
			}
		}
	}
	fresh := start(t, 2, withKeys(newKey))
	fresh.SetPeers(peersOf(a))
	harness.Poll(t, deadline, harness.Cond("a member with the new key joins", func() bool { return a.Size() == 3 && fresh.Size() == 3 }))
	stale := start(t, 3, withKeys(oldKey))
	stale.SetPeers(peersOf(a))
	harness.Poll(t, deadline, harness.Cond("a member with the old key fails to join", func() bool { return stale.JoinErr() != nil }))
	if _, known := a.Alive("node-3"); known {
		t.Error("a knows a member gossiping with the removed key")
	}
	harness.Poll(t, deadline, harness.Cond("b learns the newcomer through gossip with the new key", func() bool { return b.Size() == 3 }))

	for _, tc := range []struct {
		name string
		m    *membership.Membership
		keys [][]byte
	}{
		{"no key", a, nil},
		{"a short key", a, [][]byte{[]byte("short")}},
		{"keys for a member in clear", start(t, 4), [][]byte{newKey}},
	} {
		if err := tc.m.SetKeys(tc.keys); err == nil {
			t.Errorf("SetKeys with %s succeeded", tc.name)
		}
	}
}

func TestParseKeys(t *testing.T) {
	k16 := []byte("0123456789abcdef")
	k32 := []byte("0123456789abcdef0123456789abcdef")
	b64 := base64.StdEncoding.EncodeToString
	tests := []struct {
		name    string
		in      string
		want    [][]byte
		wantErr bool
	}{
		{"one", b64(k16) + "\n", [][]byte{k16}, false},
		{"two with comments and blanks", "# primary\n" + b64(k32) + "\n\n  " + b64(k16) + "  \n", [][]byte{k32, k16}, false},
		{"empty", "", nil, false},
		{"not base64", "not base64!\n", nil, true},
		{"wrong size", b64([]byte("short")), nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := membership.ParseKeys([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("keys (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	if _, err := membership.New(membership.Config{BindAddr: addr(0), BindPort: -1}); err == nil {
		t.Error("New accepted an empty node name")
	}
	a := start(t, 0)
	_, err := membership.New(membership.Config{NodeName: "b", BindAddr: addr(0), BindPort: int(a.LocalAddr().Port())})
	if err == nil {
		t.Error("New bound a port already in use")
	}
}

// TestPeerWithoutPort: as in a DaemonSet, every daemon gossips on the
// same port, so peers from the Node informer are bare node addresses.
func TestPeerWithoutPort(t *testing.T) {
	a := start(t, 0)
	port := int(a.LocalAddr().Port())
	b := start(t, 1, func(c *membership.Config) { c.BindPort = port })
	b.SetPeers([]membership.Peer{{Name: "node-0", Addr: addr(0)}, {Name: "node-1", Addr: addr(1)}})
	harness.Poll(t, deadline, harness.Cond("node-1 joins node-0 by address alone", func() bool { return a.Size() == 2 && b.Size() == 2 }))
	if err := b.JoinErr(); err != nil {
		t.Errorf("JoinErr = %v", err)
	}
}

func TestAdvertiseAddr(t *testing.T) {
	// Bound to every address, advertising the node's own: what a
	// hostNetwork DaemonSet does with the node's InternalIP.
	a := start(t, 0, func(c *membership.Config) { c.BindAddr = "0.0.0.0"; c.AdvertiseAddr = addr(0) })
	if got := a.LocalAddr().Addr().String(); got != addr(0) {
		t.Errorf("LocalAddr = %v, want %s", a.LocalAddr(), addr(0))
	}
	b := start(t, 1)
	b.SetPeers(peersOf(a))
	harness.Poll(t, deadline, harness.Cond("join through the advertised address", func() bool { return a.Size() == 2 && b.Size() == 2 }))
}

// TestStartWaitsAWindow: a daemon that just started may have been dead a
// moment ago, its addresses taken by others: it reports itself not
// alive (announcing no layer-2 address) for the guard's window, 2 x 4
// probe intervals of 1s here, alone.
func TestStartWaitsAWindow(t *testing.T) {
	slow := membership.LANTiming()
	slow.ProbeInterval, slow.ProbeTimeout, slow.SuspicionMult = time.Second, 500*time.Millisecond, 4
	m := start(t, 0, func(c *membership.Config) { c.Timing = slow })
	if diff := cmp.Diff(map[string]string{"node-0": "alive=false known=true"}, view(m, "node-0")); diff != "" {
		t.Errorf("right after start (-want +got):\n%s", diff)
	}
	began := time.Now()
	harness.Poll(t, deadline, harness.Cond("node-0 counts itself alive", func() bool {
		alive, _ := m.Alive("node-0")
		return alive
	}))
	t.Logf("node-0 counted itself alive after %v", time.Since(began))
}
