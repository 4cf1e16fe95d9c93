package membership

import (
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestJudge: the quorum guard's view of three to five members, with the
// default timing (100ms x 3: the window is 2 x max(3, members)
// intervals, 600ms for three members, 1s for five) and a restart grace
// of 30 s.
func TestJudge(t *testing.T) {
	now := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	long := time.Hour
	type member struct {
		state    State
		since    time.Duration // how long ago it entered state
		heard    time.Duration // how long ago it last sent a packet
		notReady bool
	}
	tests := []struct {
		name     string
		members  map[string]member // "a" is this daemon
		cutOffAt time.Duration     // how long ago a was last cut off (0: never)
		want     guardView
	}{
		{
			name:    "all alive and heard",
			members: map[string]member{"a": {StateAlive, long, 0, false}, "b": {StateAlive, long, 100 * time.Millisecond, false}, "c": {StateAlive, long, 300 * time.Millisecond, false}},
			want:    guardView{quorum: true},
		},
		{
			name:    "one silent member is no cut",
			members: map[string]member{"a": {StateAlive, long, 0, false}, "b": {StateAlive, long, 100 * time.Millisecond, false}, "c": {StateAlive, long, time.Second, false}},
			want:    guardView{quorum: true},
		},
		{
			name: "cut off: no packet from either other member within the window",
			// gossip still says alive (suspicion has not ended), but a
			// majority may be on the other side already.
			members: map[string]member{"a": {StateAlive, long, 0, false}, "b": {StateAlive, long, 700 * time.Millisecond, false}, "c": {StateAlive, long, time.Second, false}},
			want:    guardView{quorum: true, cutOff: true},
		},
		{
			name:    "a member just joined counts as heard",
			members: map[string]member{"a": {StateAlive, long, 0, false}, "b": {StateAlive, 10 * time.Millisecond, 10 * time.Millisecond, false}, "c": {StateAlive, long, long, false}},
			want:    guardView{quorum: true},
		},
		{
			name:    "cut off, and the others declared dead",
			members: map[string]member{"a": {StateAlive, long, 0, false}, "b": {StateDead, long, long, false}, "c": {StateDead, long, long, false}},
			want:    guardView{cutOff: true},
		},
		{
			name:    "the majority: a death is fenced for the window",
			members: map[string]member{"a": {StateAlive, long, 0, false}, "b": {StateAlive, long, 100 * time.Millisecond, false}, "c": {StateDead, 500 * time.Millisecond, long, false}},
			want:    guardView{quorum: true, fenced: map[string]bool{"c": true}},
		},
		{
			name:    "the majority: the fence ended",
			members: map[string]member{"a": {StateAlive, long, 0, false}, "b": {StateAlive, long, 100 * time.Millisecond, false}, "c": {StateDead, 600 * time.Millisecond, long, false}},
			want:    guardView{quorum: true},
		},
		{
			name:     "back from a cut: a waits the window before it answers again",
			members:  map[string]member{"a": {StateAlive, long, 0, false}, "b": {StateAlive, 100 * time.Millisecond, 0, false}, "c": {StateAlive, 100 * time.Millisecond, 0, false}},
			cutOffAt: 500 * time.Millisecond,
			want:     guardView{quorum: true, rejoining: true},
		},
		{
			name:     "back from a cut, the window passed",
			members:  map[string]member{"a": {StateAlive, long, 0, false}, "b": {StateAlive, time.Second, 0, false}, "c": {StateAlive, time.Second, 0, false}},
			cutOffAt: 600 * time.Millisecond,
			want:     guardView{quorum: true},
		},
		{
			name:    "two of four: exactly half, neither side can have a majority",
			members: map[string]member{"a": {StateAlive, long, 0, false}, "b": {StateAlive, long, 0, false}, "c": {StateDead, long, long, false}, "d": {StateDead, long, long, false}},
			want:    guardView{},
		},
		{
			name: "dead and NotReady in Kubernetes: gone, not counted",
			// the survivor of two crashes serves again once Kubernetes
			// confirms them.
			members: map[string]member{"a": {StateAlive, long, 0, false}, "b": {StateDead, long, long, true}, "c": {StateDead, long, long, true}},
			want:    guardView{quorum: true},
		},
		{
			name:    "NotReady but alive to gossip still counts",
			members: map[string]member{"a": {StateAlive, long, 0, false}, "b": {StateAlive, long, long, true}, "c": {StateAlive, long, long, true}},
			want:    guardView{quorum: true, cutOff: true},
		},
		{
			name:    "left members do not count",
			members: map[string]member{"a": {StateAlive, long, 0, false}, "b": {StateLeft, long, long, false}, "c": {StateLeft, long, long, false}},
			want:    guardView{quorum: true},
		},
		{
			name:    "restarting within its grace: held, counted, neither alive nor heard",
			members: map[string]member{"a": {StateAlive, long, 0, false}, "b": {StateAlive, long, 100 * time.Millisecond, false}, "c": {StateRestarting, 29 * time.Second, 29 * time.Second, false}},
			want:    guardView{quorum: true, held: map[string]bool{"c": true}},
		},
		{
			name: "restarting, and the only other member silent: cut off",
			// a restarting member is no majority's witness.
			members: map[string]member{"a": {StateAlive, long, 0, false}, "b": {StateAlive, long, time.Second, false}, "c": {StateRestarting, time.Second, time.Second, false}},
			want:    guardView{quorum: true, cutOff: true, held: map[string]bool{"c": true}},
		},
		{
			name:    "restarting with one of two others: exactly half alive",
			members: map[string]member{"a": {StateAlive, long, 0, false}, "b": {StateRestarting, time.Second, time.Second, false}},
			want:    guardView{held: map[string]bool{"b": true}},
		},
		{
			name:    "restarting past its grace: dead since it ended, fenced for the window",
			members: map[string]member{"a": {StateAlive, long, 0, false}, "b": {StateAlive, long, 100 * time.Millisecond, false}, "c": {StateRestarting, 30*time.Second + 500*time.Millisecond, long, false}},
			want:    guardView{quorum: true, fenced: map[string]bool{"c": true}},
		},
		{
			name:    "restarting long past its grace: dead",
			members: map[string]member{"a": {StateAlive, long, 0, false}, "b": {StateAlive, long, 100 * time.Millisecond, false}, "c": {StateRestarting, time.Minute, long, false}},
			want:    guardView{quorum: true},
		},
		{
			name:    "restarting and NotReady in Kubernetes: gone, not counted",
			members: map[string]member{"a": {StateAlive, long, 0, false}, "b": {StateRestarting, time.Second, time.Second, true}},
			want:    guardView{quorum: true},
		},
		{
			name: "five members, two silent: still a majority heard",
			members: map[string]member{
				"a": {StateAlive, long, 0, false}, "b": {StateAlive, long, 900 * time.Millisecond, false}, "c": {StateAlive, long, 200 * time.Millisecond, false},
				"d": {StateAlive, long, 2 * time.Second, false}, "e": {StateDead, 2 * time.Second, long, false},
			},
			want: guardView{quorum: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			members := map[string]Member{}
			in := guardInput{
				self: "a", heard: map[string]time.Time{}, notReady: map[string]bool{},
				probeInterval: 100 * time.Millisecond, suspicionMult: 3, restartGrace: 30 * time.Second,
			}
			if tt.cutOffAt > 0 {
				in.cutOffAt = ago(tt.cutOffAt)
			}
			for name, m := range tt.members {
				members[name] = Member{Name: name, State: m.state, Since: ago(m.since)}
				in.heard[name] = ago(m.heard)
				in.notReady[name] = m.notReady
			}
			got := judge(members, in, now)
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(guardView{})); diff != "" {
				t.Errorf("judge (-want +got):\n%s", diff)
			}
		})
	}
}

// TestGuardAlive: what Alive answers under each view, guarded or not.
func TestGuardAlive(t *testing.T) {
	alive := Member{Name: "b", State: StateAlive}
	dead := Member{Name: "c", State: StateDead}
	restarting := Member{Name: "r", State: StateRestarting}
	held := map[string]bool{"r": true}
	views := map[string]guardView{
		"quorum":        {quorum: true},
		"fenced":        {quorum: true, fenced: map[string]bool{"c": true}},
		"cut off":       {cutOff: true},
		"rejoining":     {quorum: true, rejoining: true},
		"half":          {},
		"held":          {quorum: true, held: held},
		"held, cut off": {cutOff: true, held: held},
		"held, half":    {held: held},
	}
	type ask struct {
		node string
		m    Member
		ok   bool
	}
	asks := []ask{{"a", Member{Name: "a", State: StateAlive}, true}, {"b", alive, true}, {"c", dead, true}, {"r", restarting, true}, {"x", Member{}, false}}
	want := map[string]map[string]string{
		"quorum":        {"a": "true/true", "b": "true/true", "c": "false/true", "r": "false/true", "x": "false/false"},
		"fenced":        {"a": "true/true", "b": "true/true", "c": "true/true", "r": "false/true", "x": "false/false"},
		"cut off":       {"a": "false/true", "b": "false/false", "c": "false/false", "r": "false/false", "x": "false/false"},
		"rejoining":     {"a": "false/true", "b": "true/true", "c": "false/true", "r": "false/true", "x": "false/false"},
		"half":          {"a": "false/false", "b": "false/false", "c": "false/false", "r": "false/false", "x": "false/false"},
		"held":          {"a": "true/true", "b": "true/true", "c": "false/true", "r": "true/true", "x": "false/false"},
		"held, cut off": {"a": "false/true", "b": "false/false", "c": "false/false", "r": "false/false", "x": "false/false"},
		"held, half":    {"a": "false/false", "b": "false/false", "c": "false/false", "r": "false/false", "x": "false/false"},
	}
	for name, v := range views {
		// Unguarded, gossip is trusted as it is, and a held member
		// is alive.
		unguarded := map[string]string{"a": "true/true", "b": "true/true", "c": "false/true", "r": "false/true", "x": "false/false"}
		if v.held["r"] {
			unguarded["r"] = "true/true"
		}
		got, gotOff := map[string]string{}, map[string]string{}
		for _, a := range asks {
			al, kn := v.alive(true, "a", a.node, a.m, a.ok)
			got[a.node] = strconv.FormatBool(al) + "/" + strconv.FormatBool(kn)
			al, kn = v.alive(false, "a", a.node, a.m, a.ok)
			gotOff[a.node] = strconv.FormatBool(al) + "/" + strconv.FormatBool(kn)
		}
		if diff := cmp.Diff(want[name], got); diff != "" {
			t.Errorf("%s, guarded (-want +got):\n%s", name, diff)
		}
		if diff := cmp.Diff(unguarded, gotOff); diff != "" {
			t.Errorf("%s, unguarded (-want +got):\n%s", name, diff)
		}
	}
}

// TestFailoverBound: the design's longest time from a death to the
// survivors acting on it, by its parts (a probe round, the unconfirmed
// suspicion, two gossip rounds and half a tick, the fence).
func TestFailoverBound(t *testing.T) {
	tolerant := LANTiming()
	tolerant.ProbeInterval, tolerant.ProbeTimeout, tolerant.SuspicionMult = time.Second, 500*time.Millisecond, 4
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, tc := range []struct {
		name    string
		timing  Timing
		members int
		guard   bool
		want    time.Duration
	}{
		{"shipped, 3, guard", LANTiming(), 3, true, ms(300 + 900 + 100 + 50 + 600)},
		{"shipped, 3, no guard", LANTiming(), 3, false, ms(300 + 900 + 100 + 50)},
		{"shipped, 100: log10 scales the suspicion, the fence grows", LANTiming(), 100, true, ms(10000 + 1800 + 100 + 50 + 20000)},
		{"the lab's tolerant timing, 3", tolerant, 3, true, ms(3000 + 12000 + 100 + 500 + 8000)},
		{"one member", LANTiming(), 0, false, ms(100 + 900 + 100 + 50)},
	} {
		if got := tc.timing.FailoverBound(tc.members, tc.guard); got != tc.want {
			t.Errorf("%s: FailoverBound = %v, want %v", tc.name, got, tc.want)
		}
	}
}
