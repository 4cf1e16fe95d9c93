package reconcile_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/election"
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/model/modeltest"
	"github.com/switchyard-lb/switchyard/core/plan"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/core/reconcile"
	"github.com/switchyard-lb/switchyard/core/runner"
	"github.com/switchyard-lb/switchyard/core/runner/runnertest"
)

// TestRunnerDrivesLoop wires the loop into the runner as the daemon does
// and checks that a failed Apply is retried after retryInterval, fully.
func TestRunnerDrivesLoop(t *testing.T) {
	h := newHarness(t)
	clk := runnertest.NewClock(t0)
	h.loop = reconcile.New(reconcile.Config{
		NodeName: "node-a", Source: h.src, Planner: plan.New(plan.Options{}),
		Dataplane: h.dp, Elected: []plugin.ElectedAnnouncer{{Announcer: h.ann, Mode: election.BGP}}, Now: clk.Now,
	})
	r := runner.New("sync", func(ctx context.Context) error { _, err := h.loop.Sync(ctx); return err }, time.Second, 10*time.Second, 3*time.Second, runner.WithClock(clk))
	h.initial()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	at := func(d time.Duration) time.Time { return t0.Add(d) }
	if got := clk.WaitTimer(t); !got.Equal(at(10 * time.Second)) {
		t.Fatalf("after the first sync the runner waits until %v, want the periodic run at 10s", got.Sub(t0))
	}
	if got := h.dry.Stats(); got.FullApplies != 1 {
		t.Fatalf("first sync: %+v, want one full Apply", got)
	}

	h.dp.FailNext(errors.New("busy"))
	h.src.Push(model.Delta{Services: map[model.ServiceKey]model.ServiceState{webKey: modeltest.State(modeltest.ClusterIP(webKey, "10.96.0.1"), webEndpoints[0])}})
	r.Trigger() // as the Source's OnChange does
	if got := clk.WaitTimer(t); !got.Equal(at(time.Second)) {
		t.Fatalf("triggered run waits until %v, want minInterval (1s)", got.Sub(t0))
	}
	clk.StepTo(at(time.Second))
	if got := clk.WaitTimer(t); !got.Equal(at(4 * time.Second)) {
		t.Fatalf("after the failed sync the runner waits until %v, want the retry at 4s", got.Sub(t0))
	}
	if _, err := h.loop.LastSync(); err == nil {
		t.Fatal("the failed sync left no error")
	}
	clk.StepTo(at(4 * time.Second))
	if got := clk.WaitTimer(t); !got.Equal(at(14 * time.Second)) {
		t.Fatalf("after the retry the runner waits until %v, want 14s", got.Sub(t0))
	}
	if got := h.dry.Stats(); got.FullApplies != 2 || got.Applies != 2 {
		t.Errorf("retry: %+v, want a second, full Apply", got)
	}
	want := cat([]string{"TCP 10.96.0.1:80 rr", "-> 10.244.1.2:8080 Masq 1 0 0"}, lbTable("203.0.113.10"))
	if diff := cmp.Diff(want, table(h.dry)); diff != "" {
		t.Errorf("dataplane after the retry (-want +got):\n%s", diff)
	}
	if last, err := h.loop.LastSync(); err != nil || !last.Equal(at(4*time.Second)) {
		t.Errorf("LastSync() = %v, %v; want 4s, nil", last.Sub(t0), err)
	}
}

func TestNoTakeBeforeSynced(t *testing.T) {
	h := newHarness(t)
	h.src.Push(model.Delta{Services: map[model.ServiceKey]model.ServiceState{webKey: modeltest.State(modeltest.ClusterIP(webKey, "10.96.0.1"), webEndpoints...)}})
	mustSync(t, h.loop)
	if n := h.src.Takes(); n != 0 {
		t.Errorf("Take called %d times before the source synced", n)
	}
	if last, err := h.loop.LastSync(); !last.IsZero() || err != nil {
		t.Errorf("LastSync() = %v, %v before the source synced; want zero, nil", last, err)
	}
}
