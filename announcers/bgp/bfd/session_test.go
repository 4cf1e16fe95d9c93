package bfd

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const (
	ms    = time.Millisecond
	local = 1   // the session's discriminator
	peer  = 500 // the remote's
)

var fast = Timers{DesiredMinTx: 300 * ms, RequiredMinRx: 300 * ms, DetectMult: 3}

// remote is a packet from the remote system, 300 ms x 3.
func remote(st State, your uint32, mod ...func(*Packet)) *Packet {
	p := &Packet{State: st, DetectMult: 3, MyDiscriminator: peer, YourDiscriminator: your,
		DesiredMinTx: 300 * ms, RequiredMinRx: 300 * ms}
	for _, m := range mod {
		m(p)
	}
	return p
}

func poll(p *Packet)  { p.Poll = true }
func final(p *Packet) { p.Final = true }

// sent is a packet of the session under test.
func sent(st State, your uint32, tx time.Duration, mod ...func(*Packet)) Packet {
	p := Packet{State: st, DetectMult: 3, MyDiscriminator: local, YourDiscriminator: your,
		DesiredMinTx: tx, RequiredMinRx: 300 * ms}
	for _, m := range mod {
		m(&p)
	}
	return p
}

func diag(d Diag) func(*Packet) { return func(p *Packet) { p.Diag = d } }

// step is one input at a time offset: a received packet, or (recv nil)
// the time passing. want are the packets sent in answer.
type step struct {
	at     time.Duration
	recv   *Packet
	want   []Packet
	change *Change
	state  State
	next   time.Duration // when the session wants the time next; 0: unchecked
}

// up is the three-way handshake from a fresh session: its first packet,
// the remote's Down, its Init, the remote's Up with a Final for nothing,
// then Up and a Poll for the faster interval, answered by a Final.
var up = []step{
	{at: 0, want: []Packet{sent(Down, 0, time.Second)}, state: Down, next: time.Second},
	{at: 100 * ms, recv: remote(Down, 0), want: []Packet{sent(Init, peer, time.Second)},
		change: &Change{From: Down, To: Init}, state: Init},
	{at: 200 * ms, recv: remote(Up, local), want: []Packet{sent(Up, peer, 300*ms, poll)},
		change: &Change{From: Init, To: Up}, state: Up},
	// The remote answers the Poll; the next packet is due 300 ms after
	// the last periodic one (at 0), brought forward from 1 s.
	{at: 210 * ms, recv: remote(Up, local, final), state: Up, next: 300 * ms},
	{at: 300 * ms, want: []Packet{sent(Up, peer, 300*ms)}, state: Up, next: 600 * ms},
}

func TestSession(t *testing.T) {
	tests := []struct {
		name   string
		timers Timers
		steps  []step
	}{{
		name:  "handshake to Up, then 300 ms packets",
		steps: append(up, step{at: 600 * ms, want: []Packet{sent(Up, peer, 300*ms)}, state: Up, next: 900 * ms}),
	}, {
		name: "down at 1 s while the remote is silent",
		steps: []step{
			{at: 0, want: []Packet{sent(Down, 0, time.Second)}, next: time.Second, state: Down},
			{at: time.Second, want: []Packet{sent(Down, 0, time.Second)}, next: 2 * time.Second, state: Down},
			{at: 1500 * ms, state: Down, next: 2 * time.Second},
		},
	}, {
		name: "detection time expires: Down with diag 1, slow again, your discriminator zeroed",
		steps: append(up[:5:5],
			// Last packet from the remote at 210 ms; 3 x 300 ms later:
			step{at: 1110 * ms, want: []Packet{sent(Down, 0, time.Second, diag(DiagDetectionExpired), poll)},
				change: &Change{From: Up, To: Down, Diag: DiagDetectionExpired}, state: Down, next: 2110 * ms},
		),
	}, {
		name: "detection time is the remote's multiplier times the slower of its tx and our rx",
		steps: []step{
			{at: 0, want: []Packet{sent(Down, 0, time.Second)}, state: Down},
			{at: 10 * ms, recv: remote(Down, 0, func(p *Packet) { p.DetectMult = 5; p.DesiredMinTx = time.Second }),
				want: []Packet{sent(Init, peer, time.Second)}, change: &Change{From: Down, To: Init}, state: Init},
			{at: 999 * ms, state: Init, next: time.Second},
			{at: 5010 * ms, want: []Packet{sent(Down, 0, time.Second, diag(DiagDetectionExpired))},
				change: &Change{From: Init, To: Down, Diag: DiagDetectionExpired}, state: Down},
		},
	}, {
		name: "remote signals Down: a failure, diag 3",
		steps: append(up[:5:5],
			step{at: 400 * ms, recv: remote(Down, 0, diag(DiagDetectionExpired)),
				want:   []Packet{sent(Down, peer, time.Second, diag(DiagNeighborDown), poll)},
				change: &Change{From: Up, To: Down, Diag: DiagNeighborDown, RemoteDiag: DiagDetectionExpired}, state: Down},
		),
	}, {
		name: "remote AdminDown: Down, not a failure",
		steps: append(up[:5:5],
			step{at: 400 * ms, recv: remote(AdminDown, 0, diag(DiagAdminDown)),
				want:   []Packet{sent(Down, peer, time.Second, diag(DiagNeighborDown), poll)},
				change: &Change{From: Up, To: Down, Diag: DiagNeighborDown, RemoteAdminDown: true, RemoteDiag: DiagAdminDown}, state: Down},
		),
	}, {
		name: "remote replaces its session (FRR): Down marked RemoteRestart, then Up with the new one; the old one is ignored",
		steps: append(up[:5:5],
			step{at: 400 * ms, recv: remote(Down, 0, func(p *Packet) { p.MyDiscriminator = 777 }),
				want:   []Packet{sent(Down, 777, time.Second, diag(DiagNeighborDown), poll)},
				change: &Change{From: Up, To: Down, Diag: DiagNeighborDown, RemoteRestart: true}, state: Down},
			// The old remote session still says Up to us: ignored.
			step{at: 450 * ms, recv: remote(Up, local), state: Down},
			step{at: 500 * ms, recv: remote(Down, local, func(p *Packet) { p.MyDiscriminator = 777 }),
				want: []Packet{sent(Init, 777, time.Second, poll)}, change: &Change{From: Down, To: Init}, state: Init},
			step{at: 600 * ms, recv: remote(Up, local, func(p *Packet) { p.MyDiscriminator = 777 }),
				want: []Packet{sent(Up, 777, 300*ms, poll)}, change: &Change{From: Init, To: Up}, state: Up},
		),
	}, {
		name: "remote's Poll is answered at once with a Final, without Poll",
		steps: append(up[:5:5],
			step{at: 350 * ms, recv: remote(Up, local, poll, func(p *Packet) { p.RequiredMinRx = 500 * ms }),
				want: []Packet{sent(Up, peer, 300*ms, final)}, state: Up, next: 800 * ms},
			step{at: 800 * ms, want: []Packet{sent(Up, peer, 300*ms)}, state: Up, next: 1250 * ms}, // the detection timer, before the packet at 1.3 s,
		),
	}, {
		name: "remote asks for no packets (required min rx 0): only Finals",
		steps: []step{
			{at: 0, want: []Packet{sent(Down, 0, time.Second)}, state: Down},
			{at: 10 * ms, recv: remote(Down, 0, func(p *Packet) { p.RequiredMinRx = 0 }),
				want: []Packet{sent(Init, peer, time.Second)}, change: &Change{From: Down, To: Init}, state: Init, next: 910 * ms},
			{at: 20 * ms, recv: remote(Down, peer, poll, func(p *Packet) { p.RequiredMinRx = 0 }),
				want: []Packet{sent(Init, peer, time.Second, final)}, state: Init, next: 920 * ms},
		},
	}, {
		name: "AdminDown packets from the remote while Down change nothing",
		steps: []step{
			{at: 0, want: []Packet{sent(Down, 0, time.Second)}, state: Down},
			{at: 10 * ms, recv: remote(AdminDown, 0), state: Down},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runSteps(t, tt.timers, tt.steps)
		})
	}
}

func runSteps(t *testing.T, timers Timers, steps []step) *Session {
	t.Helper()
	if timers == (Timers{}) {
		timers = fast
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := NewSession(t0, local, timers, func(d time.Duration) time.Duration { return d })
	for i, st := range steps {
		now := t0.Add(st.at)
		var out Output
		if st.recv != nil {
			out = s.Receive(now, *st.recv)
		} else {
			out = s.Advance(now)
		}
		if d := cmp.Diff(st.want, out.Send); d != "" {
			t.Errorf("step %d (at %s): sent (-want +got):\n%s", i, st.at, d)
		}
		if d := cmp.Diff(st.change, out.Change); d != "" {
			t.Errorf("step %d (at %s): change (-want +got):\n%s", i, st.at, d)
		}
		if s.State() != st.state {
			t.Errorf("step %d (at %s): state %s, want %s", i, st.at, s.State(), st.state)
		}
		if st.next != 0 {
			if got := s.Next().Sub(t0); got != st.next {
				t.Errorf("step %d (at %s): next at %s, want %s", i, st.at, got, st.next)
			}
		}
	}
	return s
}

// TestSessionIntervalChangesWhileUp: RFC 5880 §6.8.3. A larger transmit
// interval and a smaller receive interval take effect only when the
// remote's Final ends the Poll Sequence.
func TestSessionIntervalChangesWhileUp(t *testing.T) {
	s := runSteps(t, fast, up)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }

	s.SetTimers(Timers{DesiredMinTx: time.Second, RequiredMinRx: 100 * ms, DetectMult: 3})
	st := s.Status()
	if !st.Polling || st.TxInterval != 300*ms || st.DetectionTime != 900*ms {
		t.Fatalf("during the Poll: %+v, want polling, tx 300ms, detection 900ms", st)
	}
	out := s.Advance(at(600 * ms))
	want := []Packet{{State: Up, Poll: true, DetectMult: 3, MyDiscriminator: local, YourDiscriminator: peer,
		DesiredMinTx: time.Second, RequiredMinRx: 100 * ms}}
	if d := cmp.Diff(want, out.Send); d != "" {
		t.Errorf("poll packet (-want +got):\n%s", d)
	}
	// The remote answers, and itself sends every 100 ms from now.
	s.Receive(at(610*ms), *remote(Up, local, final, func(p *Packet) { p.DesiredMinTx = 100 * ms; p.RequiredMinRx = 100 * ms }))
	st = s.Status()
	if st.Polling || st.TxInterval != time.Second || st.DetectionTime != 300*ms {
		t.Errorf("after the Final: %+v, want tx 1s, detection 300ms", st)
	}
}

// TestSessionShutdown: AdminDown tells the remote with diag 7 and then
// ignores everything.
func TestSessionShutdown(t *testing.T) {
	s := runSteps(t, fast, up)
	now := time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC)
	out := s.Shutdown(now)
	want := Output{
		Send:   []Packet{{State: AdminDown, Diag: DiagAdminDown, DetectMult: 3, MyDiscriminator: local, YourDiscriminator: peer, DesiredMinTx: 300 * ms, RequiredMinRx: 300 * ms}},
		Change: &Change{From: Up, To: AdminDown, Diag: DiagAdminDown},
	}
	if d := cmp.Diff(want, out); d != "" {
		t.Errorf("Shutdown (-want +got):\n%s", d)
	}
	if got := s.Receive(now, *remote(Up, local)); got.Change != nil || len(got.Send) != 0 || !s.Next().IsZero() {
		t.Errorf("after Shutdown: %+v, next %v; want nothing", got, s.Next())
	}
}

func TestChangeFailure(t *testing.T) {
	for _, tt := range []struct {
		c    Change
		want bool
	}{
		{Change{From: Up, To: Down, Diag: DiagDetectionExpired}, true},
		{Change{From: Up, To: Down, Diag: DiagNeighborDown, RemoteDiag: DiagDetectionExpired}, true},
		{Change{From: Up, To: Down, Diag: DiagNeighborDown, RemoteDiag: 5}, true}, // path down
		// A remote that resets its session without a diagnostic (FRR
		// re-registering it once BGP is up).
		{Change{From: Up, To: Down, Diag: DiagNeighborDown}, false},
		// Nor one that says this side signaled Down while it was Up
		// (FRR 8.4 when bgpd re-registers the session: measured).
		{Change{From: Up, To: Down, Diag: DiagNeighborDown, RemoteDiag: DiagNeighborDown}, false},
		{Change{From: Up, To: Down, Diag: DiagNeighborDown, RemoteRestart: true}, false},
		{Change{From: Up, To: Down, Diag: DiagNeighborDown, RemoteAdminDown: true}, false},
		{Change{From: Init, To: Down, Diag: DiagDetectionExpired}, false},
		{Change{From: Up, To: AdminDown, Diag: DiagAdminDown}, false},
	} {
		if got := tt.c.Failure(); got != tt.want {
			t.Errorf("%+v.Failure() = %v, want %v", tt.c, got, tt.want)
		}
	}
}

// TestRFCJitter: each interval is 75-100% of the nominal one, and at
// most 90% with a detect multiplier of 1 (RFC 5880 §6.8.7).
func TestRFCJitter(t *testing.T) {
	for _, tt := range []struct {
		mult     uint8
		lo, hi   time.Duration
		seenBoth bool
	}{{3, 750 * ms, time.Second, true}, {1, 750 * ms, 900 * ms, true}} {
		j := rfcJitter(tt.mult)
		minSeen, maxSeen := time.Hour, time.Duration(0)
		for range 2000 {
			d := j(time.Second)
			minSeen, maxSeen = min(minSeen, d), max(maxSeen, d)
		}
		if minSeen < tt.lo || maxSeen > tt.hi {
			t.Errorf("mult %d: jittered 1s within [%s, %s], want within [%s, %s]", tt.mult, minSeen, maxSeen, tt.lo, tt.hi)
		}
		if maxSeen-minSeen < (tt.hi-tt.lo)/2 {
			t.Errorf("mult %d: jitter spread only [%s, %s]", tt.mult, minSeen, maxSeen)
		}
	}
}
