package reconcile_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/switchyard-lb/switchyard/core/election"
	"github.com/switchyard-lb/switchyard/core/metrics"
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/model/modeltest"
	"github.com/switchyard-lb/switchyard/core/plan"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/core/reconcile"
	"github.com/switchyard-lb/switchyard/core/runner"
	"github.com/switchyard-lb/switchyard/core/runner/runnertest"
)

// applied is what one Apply was asked to do.
type applied struct {
	Full    bool
	Changed []model.ServiceKey
}

// resyncEveryMinute replaces h's loop by one that resyncs fully every
// minute on clock.
func (h *harness) resyncEveryMinute(clock *runnertest.Clock) {
	h.loop = reconcile.New(reconcile.Config{
		NodeName: "node-a", Source: h.src, Planner: plan.New(plan.Options{}), Dataplane: h.dp,
		Now: clock.Now, FullSyncPeriod: time.Minute,
	})
}

// newResyncHarness returns a harness whose loop resyncs every minute on
// the clock, and the record of its successful Applies. An Apply
// advances the clock by applyTook (a full one by fullTook), as a slow
// dataplane would, after calling onApply when set.
func newResyncHarness(t *testing.T, clock *runnertest.Clock, applyTook, fullTook time.Duration, onApply func(plugin.Update)) (*harness, *[]applied) {
	h := newHarness(t)
	h.resyncEveryMinute(clock)
	var got []applied
	h.dp.AfterApply(func(u plugin.Update) {
		got = append(got, applied{Full: u.Full, Changed: u.Changed})
		if onApply != nil {
			onApply(u)
		}
		if u.Full {
			clock.Step(fullTook)
		} else {
			clock.Step(applyTook)
		}
	})
	return h, &got
}

func TestPeriodicResyncAppliesPendingChangesFirst(t *testing.T) {
	clock := runnertest.NewClock(t0)
	var h *harness
	var servedBeforeResync bool
	h, got := newResyncHarness(t, clock, 0, 0, func(u plugin.Update) {
		if !u.Full {
			servedBeforeResync = hasBackend(h, "10.244.9.9")
		}
	})
	h.initial()
	mustSync(t, h.loop)
	*got = nil

	clock.StepTo(t0.Add(time.Minute)) // the resync is due
	moved := modeltest.State(modeltest.ClusterIP(webKey, "10.96.0.1"), modeltest.Ready("10.244.9.9", "node-z"))
	h.src.Push(model.Delta{Services: map[model.ServiceKey]model.ServiceState{webKey: moved}})
	mustSync(t, h.loop)
	want := []applied{{Changed: []model.ServiceKey{webKey}}, {Full: true, Changed: []model.ServiceKey{webKey}}}
	if diff := cmp.Diff(want, *got); diff != "" {
		t.Errorf("Applies of the sync with a change and a resync due (-want +got):\n%s", diff)
	}
	if !servedBeforeResync {
		t.Errorf("the change was not in the dataplane before the resync started:\n%s", h.dry)
	}
	if !hasBackend(h, "10.244.9.9") {
		t.Errorf("the change is missing after the resync:\n%s", h.dry)
	}
}

// TestRequiredFullSyncIsNotPrecededByAPartial: after a failed Apply the
// next sync must be full, and its changes are not applied on their own
// first even when the periodic resync is due as well.
func TestRequiredFullSyncIsNotPrecededByAPartial(t *testing.T) {
	clock := runnertest.NewClock(t0)
	h, got := newResyncHarness(t, clock, 0, 0, nil)
	h.initial()
	mustSync(t, h.loop) // the first sync is full by necessity
	h.src.Push(model.Delta{Services: map[model.ServiceKey]model.ServiceState{
		webKey: modeltest.State(modeltest.ClusterIP(webKey, "10.96.0.1"), modeltest.Ready("10.244.8.8", "node-z")),
	}})
	h.dp.FailNext(errors.New("netlink: dump interrupted"))
	if _, err := h.loop.Sync(context.Background()); err == nil {
		t.Fatal("Sync succeeded with a failing dataplane")
	}
	clock.StepTo(t0.Add(time.Minute)) // the periodic resync is due too
	h.src.Push(model.Delta{Services: map[model.ServiceKey]model.ServiceState{
		webKey: modeltest.State(modeltest.ClusterIP(webKey, "10.96.0.1"), modeltest.Ready("10.244.9.9", "node-z")),
	}})
	mustSync(t, h.loop)
	var modes []bool
	for _, a := range *got {
		modes = append(modes, a.Full)
	}
	if diff := cmp.Diff([]bool{true, true}, modes); diff != "" {
		t.Errorf("Full of each Apply (-want +got):\n%s", diff)
	}
}

func TestSlowResyncIsNotFollowedByAnother(t *testing.T) {
	clock := runnertest.NewClock(t0)
	// A full Apply takes longer than the period, as the first one can
	// at thousands of Services under emulation.
	h, got := newResyncHarness(t, clock, time.Second, 90*time.Second, nil)
	h.initial()
	mustSync(t, h.loop) // t0 to t0+90s
	change := func(backend string) {
		h.src.Push(model.Delta{Services: map[model.ServiceKey]model.ServiceState{
			webKey: modeltest.State(modeltest.ClusterIP(webKey, "10.96.0.1"), modeltest.Ready(backend, "node-z")),
		}})
	}
	var fulls []bool
	for i, at := range []time.Duration{91 * time.Second, 100 * time.Second, 120 * time.Second} {
		clock.StepTo(t0.Add(at))
		*got = nil
		change("10.244.9." + string(rune('1'+i)))
		mustSync(t, h.loop)
		full := false
		for _, a := range *got {
			full = full || a.Full
		}
		fulls = append(fulls, full)
	}
	// 91s and 100s are less than half a period after the first resync
	// ended; 120s is half a period after.
	if diff := cmp.Diff([]bool{false, false, true}, fulls); diff != "" {
		t.Errorf("whether each change's sync resynced (-want +got):\n%s", diff)
	}
}

// TestResyncWaitsForItsOwnDuration: after a periodic resync the next
// waits the period from its start, half a period from its end, and nine
// times as long as it took from its end, so that slow resyncs (10,000
// Services under emulation: 29 s of a 30 s period) leave the changes
// most of the loop's time.
func TestResyncWaitsForItsOwnDuration(t *testing.T) {
	for _, tc := range []struct {
		name string
		took time.Duration // each periodic resync's Apply
		// syncs are the times of the syncs after the first resync (at
		// 60s), full whether each resynced.
		syncs []time.Duration
		full  []bool
	}{
		{"instant: the period", 0, []time.Duration{119 * time.Second, 120 * time.Second}, []bool{false, true}},
		{"fast: the period", 2 * time.Second, []time.Duration{119 * time.Second, 120 * time.Second}, []bool{false, true}},
		{"slow: nine times its duration after its end", 20 * time.Second,
			[]time.Duration{120 * time.Second, 259 * time.Second, 260 * time.Second}, []bool{false, false, true}},
		{"slower than the period", 70 * time.Second,
			[]time.Duration{200 * time.Second, 759 * time.Second, 760 * time.Second}, []bool{false, false, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := runnertest.NewClock(t0)
			fulls := 0
			h, got := newResyncHarness(t, clock, 0, 0, func(u plugin.Update) {
				if u.Full {
					if fulls > 0 { // the first is the start's, not a resync
						clock.Step(tc.took)
					}
					fulls++
				}
			})
			h.initial()
			mustSync(t, h.loop) // the start's full sync, at t0
			clock.StepTo(t0.Add(time.Minute))
			mustSync(t, h.loop) // the first periodic resync
			if fulls != 2 {
				t.Fatalf("%d full Applies by the first resync, want 2", fulls)
			}
			var full []bool
			for _, at := range tc.syncs {
				clock.StepTo(t0.Add(at))
				*got = nil
				mustSync(t, h.loop)
				resynced := false
				for _, a := range *got {
					resynced = resynced || a.Full
				}
				full = append(full, resynced)
			}
			if diff := cmp.Diff(tc.full, full); diff != "" {
				t.Errorf("whether each sync resynced (-want +got):\n%s", diff)
			}
		})
	}
}

// hasBackend reports whether the dataplane holds a real server at addr.
func hasBackend(h *harness, addr string) bool {
	for _, l := range table(h.dry) {
		if slices.Contains(strings.Fields(l), addr+":8080") {
			return true
		}
	}
	return false
}

// TestFailuresAreLoggedAndCounted: every failed Apply is counted in
// sync_errors_total{stage} and logged at error level with its error,
// the one of the changes applied before a periodic resync too (the
// resync then applies them); a failed announcer likewise.
func TestFailuresAreLoggedAndCounted(t *testing.T) {
	clock := runnertest.NewClock(t0)
	h := newHarness(t)
	var logs strings.Builder
	h.loop = reconcile.New(reconcile.Config{
		NodeName: "node-a", Source: h.src, Planner: plan.New(plan.Options{}), Dataplane: h.dp,
		Elected: []plugin.ElectedAnnouncer{{Announcer: h.ann, Mode: election.BGP}}, Metrics: h.m,
		Log: slog.New(slog.NewTextHandler(&logs, nil)),
		Now: clock.Now, FullSyncPeriod: time.Minute,
	})
	h.initial()
	h.ann.FailNext(errors.New("injected: announce"))
	if _, err := h.loop.Sync(context.Background()); err == nil || !strings.Contains(err.Error(), "injected: announce") {
		t.Fatalf("Sync with a failing announcer = %v, want its error", err)
	}

	clock.StepTo(t0.Add(time.Minute)) // the resync is due
	h.src.Push(model.Delta{Services: map[model.ServiceKey]model.ServiceState{
		webKey: modeltest.State(modeltest.ClusterIP(webKey, "10.96.0.1"), modeltest.Ready("10.244.9.9", "node-z")),
	}})
	h.dp.FailNext(errors.New("injected: partial"))
	mustSync(t, h.loop) // the full Apply after it succeeds
	if !hasBackend(h, "10.244.9.9") {
		t.Errorf("the resync did not apply the change whose own Apply failed:\n%s", h.dry)
	}

	h.src.Push(model.Delta{Services: map[model.ServiceKey]model.ServiceState{
		webKey: modeltest.State(modeltest.ClusterIP(webKey, "10.96.0.1"), modeltest.Ready("10.244.9.8", "node-z")),
	}})
	h.dp.FailNext(errors.New("injected: full"))
	if _, err := h.loop.Sync(context.Background()); err == nil || !strings.Contains(err.Error(), "injected: full") {
		t.Fatalf("Sync with a failing dataplane = %v, want its error", err)
	}

	for stage, want := range map[string]float64{metrics.StageDataplane: 2, metrics.StageAnnounce: 1, metrics.StageHealthCheck: 0} {
		if got := testutil.ToFloat64(h.m.SyncErrors.WithLabelValues(stage)); got != want {
			t.Errorf("sync_errors_total{stage=%s} = %v, want %v", stage, got, want)
		}
	}
	for _, want := range []string{
		`level=ERROR msg="sync failed" stage=dataplane err="dataplane dryrun: changes before the periodic resync: injected: partial" full=false changed=1`,
		`level=ERROR msg="sync failed" stage=dataplane err="dataplane dryrun: injected: full" full=false changed=1`,
		`level=ERROR msg="sync failed" stage=announce err="announcer arp: injected: announce" addresses=1`,
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, logs.String())
		}
	}
}

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
