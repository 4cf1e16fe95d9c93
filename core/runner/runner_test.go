package runner_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/runner"
	"github.com/switchyard-lb/switchyard/core/runner/runnertest"
)

const (
	minInterval   = time.Second
	maxInterval   = 10 * time.Second
	retryInterval = 3 * time.Second
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// harness runs a Runner on a fake clock and records when fn ran.
type harness struct {
	clk *runnertest.Clock
	r   *runner.Runner

	mu       sync.Mutex
	calls    []time.Duration // offsets from t0
	failNext error
	block    chan struct{} // when set, the next run waits for it to close
	running  chan struct{} // closed when a blocked run has started
	called   chan struct{} // receives once per run, as it starts
}

func newHarness(t *testing.T, minI, maxI, retryI time.Duration, opts ...runner.Option) *harness {
	h := &harness{clk: runnertest.NewClock(t0), called: make(chan struct{}, 100)}
	h.r = runner.New("test", h.fn, minI, maxI, retryI, append([]runner.Option{runner.WithClock(h.clk)}, opts...)...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return h
}

func (h *harness) fn(context.Context) error {
	select {
	case h.called <- struct{}{}:
	default:
	}
	h.mu.Lock()
	h.calls = append(h.calls, h.clk.Now().Sub(t0))
	err := h.failNext
	h.failNext = nil
	block, running := h.block, h.running
	h.block, h.running = nil, nil
	h.mu.Unlock()
	if block != nil {
		close(running)
		<-block
	}
	return err
}

func (h *harness) Calls() []time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]time.Duration(nil), h.calls...)
}

func (h *harness) failNextRun() {
	h.mu.Lock()
	h.failNext = errors.New("boom")
	h.mu.Unlock()
}

// advanceTo moves the fake clock to t0+at.
func (h *harness) advanceTo(at time.Duration) { h.clk.StepTo(t0.Add(at)) }

type step struct {
	name string
	act  func(h *harness)
	// calls are all runs so far, as offsets from t0; arms are the
	// deadlines (offsets) of the timers the runner armed after act.
	calls []time.Duration
	arms  []time.Duration
}

func s(d ...time.Duration) []time.Duration { return d }

// run takes the steps in turn, checking after each the timers armed and
// the runs so far.
func (h *harness) run(t *testing.T, steps []step) {
	t.Helper()
	for _, st := range steps {
		if st.act != nil {
			st.act(h)
		}
		var arms []time.Duration
		for range st.arms {
			arms = append(arms, h.clk.WaitTimer(t).Sub(t0))
		}
		if diff := cmp.Diff(st.arms, arms); diff != "" {
			t.Fatalf("%s: armed timers (-want +got):\n%s", st.name, diff)
		}
		if diff := cmp.Diff(st.calls, h.Calls()); diff != "" {
			t.Fatalf("%s: runs (-want +got):\n%s", st.name, diff)
		}
	}
}

const ms = time.Millisecond

func TestRunner(t *testing.T) {
	start := step{name: "first run is immediate, then periodic", calls: s(0), arms: s(maxInterval)}
	tests := []struct {
		name  string
		steps []step
	}{
		{"periodic runs without triggers", []step{start,
			{name: "maxInterval", act: func(h *harness) { h.advanceTo(10 * time.Second) }, calls: s(0, 10*time.Second), arms: s(20 * time.Second)},
			{name: "again", act: func(h *harness) { h.advanceTo(20 * time.Second) }, calls: s(0, 10*time.Second, 20*time.Second), arms: s(30 * time.Second)},
		}},
		{"trigger within minInterval waits for it", []step{start,
			{name: "trigger at 300ms", act: func(h *harness) { h.advanceTo(300 * ms); h.r.Trigger() }, calls: s(0), arms: s(time.Second)},
			{name: "runs at 1s", act: func(h *harness) { h.advanceTo(time.Second) }, calls: s(0, time.Second), arms: s(11 * time.Second)},
		}},
		{"trigger after minInterval runs at once", []step{start,
			{name: "trigger at 5s", act: func(h *harness) { h.advanceTo(5 * time.Second); h.r.Trigger() }, calls: s(0, 5*time.Second), arms: s(15 * time.Second)},
		}},
		{"triggers during a run coalesce into one run", []step{start,
			{name: "run blocks", act: func(h *harness) {
				h.mu.Lock()
				block, running := make(chan struct{}), make(chan struct{})
				h.block, h.running = block, running
				h.mu.Unlock()
				h.advanceTo(2 * time.Second)
				h.r.Trigger() // starts the blocking run at 2s
				<-running
				h.r.Trigger()
				h.r.Trigger()
				h.r.Trigger()
				close(block)
			}, calls: s(0, 2*time.Second), arms: s(12*time.Second, 3*time.Second)},
			{name: "one more run", act: func(h *harness) { h.advanceTo(3 * time.Second) }, calls: s(0, 2*time.Second, 3*time.Second), arms: s(13 * time.Second)},
		}},
		{"error retries after retryInterval", []step{start,
			{name: "periodic run fails", act: func(h *harness) { h.failNextRun(); h.advanceTo(10 * time.Second) }, calls: s(0, 10*time.Second), arms: s(13 * time.Second)},
			{name: "retry succeeds", act: func(h *harness) { h.advanceTo(13 * time.Second) }, calls: s(0, 10*time.Second, 13*time.Second), arms: s(23 * time.Second)},
		}},
		{"trigger before the retry runs sooner", []step{start,
			{name: "fails", act: func(h *harness) { h.failNextRun(); h.advanceTo(10 * time.Second) }, calls: s(0, 10*time.Second), arms: s(13 * time.Second)},
			{name: "trigger", act: func(h *harness) { h.r.Trigger() }, calls: s(0, 10*time.Second), arms: s(11 * time.Second)},
			{name: "runs at minInterval", act: func(h *harness) { h.advanceTo(11 * time.Second) }, calls: s(0, 10*time.Second, 11*time.Second), arms: s(21 * time.Second)},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, minInterval, maxInterval, retryInterval)
			h.run(t, tc.steps)
		})
	}
}

// TestBurst: with WithBurst(2), a trigger right after a run (a statistics
// tick's) runs at once after a quiet time; back-to-back triggers then
// settle at one run per minInterval.
func TestBurst(t *testing.T) {
	h := newHarness(t, minInterval, maxInterval, retryInterval, runner.WithBurst(2))

	steps := []step{
		{name: "first run", calls: s(0), arms: s(maxInterval)},
		{name: "quiet, then a run at 5s", act: func(h *harness) { h.advanceTo(5 * time.Second); h.r.Trigger() },
			calls: s(0, 5*time.Second), arms: s(15 * time.Second)},
		{name: "a trigger 100ms later runs at once: the burst", act: func(h *harness) { h.advanceTo(5100 * ms); h.r.Trigger() },
			calls: s(0, 5*time.Second, 5100*ms), arms: s(15100 * ms)},
		{name: "the next waits for a refill", act: func(h *harness) { h.advanceTo(5200 * ms); h.r.Trigger() },
			calls: s(0, 5*time.Second, 5100*ms), arms: s(6 * time.Second)},
		{name: "runs at 6s", act: func(h *harness) { h.advanceTo(6 * time.Second) },
			calls: s(0, 5*time.Second, 5100*ms, 6*time.Second), arms: s(16 * time.Second)},
		{name: "and the next at 7s", act: func(h *harness) { h.r.Trigger() },
			calls: s(0, 5*time.Second, 5100*ms, 6*time.Second), arms: s(7 * time.Second)},
	}
	h.run(t, steps)
}

func TestRetryNeverSoonerThanMinInterval(t *testing.T) {
	h := newHarness(t, time.Second, maxInterval, 100*ms)
	h.clk.WaitTimer(t) // after the first run, at 0
	h.failNextRun()
	h.advanceTo(10 * time.Second)
	// The run at 10s fails; its retry (100ms later) waits for minInterval.
	if got, want := h.clk.WaitTimer(t).Sub(t0), 11*time.Second; got != want {
		t.Errorf("retry armed at %v, want %v", got, want)
	}
}

func TestRunStopsWithContextAndPassesIt(t *testing.T) {
	clk := runnertest.NewClock(t0)
	started := make(chan struct{})
	sawCancel := make(chan struct{})
	r := runner.New("test", func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		close(sawCancel)
		return ctx.Err()
	}, minInterval, maxInterval, retryInterval, runner.WithClock(clk))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	<-started
	cancel()
	<-sawCancel
	<-done
	if r.Name() != "test" {
		t.Errorf("Name() = %q, want %q", r.Name(), "test")
	}
}

func TestRealClock(t *testing.T) {
	runs := make(chan struct{}, 10)
	r := runner.New("real", func(context.Context) error {
		runs <- struct{}{}
		return nil
	}, 0, time.Hour, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	<-runs // the first run
	r.Trigger()
	<-runs // the triggered run: minInterval 0 lets it run at once
	cancel()
	<-done
}

func TestNoPeriodicRunWithoutMaxInterval(t *testing.T) {
	h := newHarness(t, minInterval, 0, retryInterval)
	// After the first run nothing is due, so the runner arms no timer
	// until a trigger arrives. (A trigger before a run starts would
	// coalesce into it: wait for the run first.)
	<-h.called
	h.r.Trigger()
	if got := h.clk.WaitTimer(t).Sub(t0); got != minInterval {
		t.Fatalf("first timer armed at %v, want %v", got, minInterval)
	}
	h.advanceTo(time.Hour)
	<-h.called
	h.r.Trigger()
	if got, want := h.clk.WaitTimer(t).Sub(t0), time.Hour+minInterval; got != want {
		t.Fatalf("timer armed at %v, want %v", got, want)
	}
	if diff := cmp.Diff(s(0, time.Hour), h.Calls()); diff != "" {
		t.Errorf("runs (-want +got):\n%s", diff)
	}
}
