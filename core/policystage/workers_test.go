package policystage_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/model/modeltest"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/core/plugin/plugintest"
	"github.com/switchyard-lb/switchyard/core/policystage"
	"github.com/switchyard-lb/switchyard/core/runner/runnertest"
	"github.com/switchyard-lb/switchyard/ipvs/dryrun"
)

// barrierWait bounds how long the tests' policies wait for each other;
// the tests fail rather than hang when the evaluations do not overlap. It
// bounds a failure only: a passing run waits for no more than the
// evaluations' overlap.
const barrierWait = 2 * time.Minute

func workerKey(i int) model.ServiceKey {
	return model.ServiceKey{Namespace: "w", Name: fmt.Sprintf("svc-%02d", i)}
}

// workerIndex is i of the Service workerKey(i) named.
func workerIndex(in *plugin.PolicyInput) int {
	i, err := strconv.Atoi(strings.TrimPrefix(in.Service.Key.Name, "svc-"))
	if err != nil {
		panic(err)
	}
	return i
}

// workersLoop is a loop over n ClusterIP Services, workerKey(0) to
// workerKey(n-1), of two endpoints each, on the policy that policyOf
// names (default "p"), evaluated by the given number of workers.
type workersLoop struct {
	loop *loop
	dry  *dryrun.Dataplane
	pols *plugintest.Policies
	rep  *plugintest.Reporter
	pm   *policystage.Metrics
}

func newWorkersLoop(t *testing.T, n, workers int, policyOf func(i int) string) *workersLoop {
	t.Helper()
	w := &workersLoop{dry: dryrun.New(), pols: plugintest.NewPolicies("p"), rep: plugintest.NewReporter(), pm: policystage.NewMetrics(nil)}
	src := plugintest.NewSource()
	d := model.Delta{Nodes: map[string]*model.Node{"node-a": nodeA}, Services: map[model.ServiceKey]model.ServiceState{}}
	for i := range n {
		st := modeltest.State(modeltest.ClusterIP(workerKey(i), fmt.Sprintf("10.96.1.%d", i)),
			modeltest.Ready(fmt.Sprintf("10.244.1.%d", i), "node-a"), modeltest.Ready(fmt.Sprintf("10.244.2.%d", i), "node-b"))

		st.Service.Policy = "p"
		if policyOf != nil {
			st.Service.Policy = policyOf(i)
		}
		d.Services[workerKey(i)] = st
	}
	src.Push(d)
	src.SetSynced(true)
	w.loop = newLoop(src, w.dry, func() time.Time { return t0 }, policystage.Config{
		Policies: w.pols, Reporter: w.rep, Metrics: w.pm, Deadline: barrierWait + time.Minute, Workers: workers,
	})
	return w
}

// weightedTable is the table of workerKey(i) with weights w1, w2.
func weightedTable(i int, scheduler string, w1, w2 uint32) []string {
	return []string{
		fmt.Sprintf("TCP 10.96.1.%d:80 %s", i, scheduler),
		fmt.Sprintf("-> 10.244.1.%d:8080 Masq %d 0 0", i, w1),
		fmt.Sprintf("-> 10.244.2.%d:8080 Masq %d 0 0", i, w2),
	}
}

// TestPolicyWorkersEvaluateConcurrently proves the stage evaluates
// Services at the same time, and no more at once than its workers: the
// policy blocks until as many evaluations as there are workers are in
// flight (failing after barrierWait otherwise) and records the most it saw.
func TestPolicyWorkersEvaluateConcurrently(t *testing.T) {
	const workers, services = 4, 12
	waitCtx, cancel := context.WithTimeout(context.Background(), barrierWait)
	defer cancel()
	var (
		mu             sync.Mutex
		inflight, most int
		all            = make(chan struct{}) // closed once workers evaluations are in flight
		release        sync.Once
	)
	pol := plugintest.NewFunc("p", func(ctx context.Context, in *plugin.PolicyInput) (plugin.PolicyResult, error) {
		mu.Lock()
		inflight++
		most = max(most, inflight)
		if inflight == workers {
			release.Do(func() { close(all) })
		}
		mu.Unlock()
		defer func() {
			mu.Lock()
			inflight--
			mu.Unlock()
		}()
		select {
		case <-all:
			return weights(3, 1)(ctx, in)
		case <-waitCtx.Done():
			return plugin.PolicyResult{}, fmt.Errorf("fewer than %d evaluations in flight after %v", workers, barrierWait)
		}
	})
	w := newWorkersLoop(t, services, workers, nil)
	w.pols.Set("p", pol, nil, nil)
	mustSync(t, w.loop)

	var want []string
	for i := range services {
		want = append(want, weightedTable(i, "wrr", 3, 1)...)
	}
	if diff := cmp.Diff(want, table(w.dry)); diff != "" {
		t.Errorf("dataplane (-want +got):\n%s", diff)
	}
	if most != workers {
		t.Errorf("at most %d evaluations were in flight at once, want %d (the number of workers)", most, workers)
	}
	if got := pol.Calls(); got != services {
		t.Errorf("%d evaluations, want %d", got, services)
	}
	if got := testutil.ToFloat64(w.pm.Evaluations.WithLabelValues("p", policystage.ResultSuccess)); got != services {
		t.Errorf("evaluations{p,success} = %v, want %d", got, services)
	}
}

// TestPolicyWorkersDeterministic runs the same round with one worker and
// with one worker per Service, where the evaluations end in reverse
// order (each waits for the next Service's to end): the plan, the
// Services handed to the dataplane, the Events, the conditions and the
// state must not differ.
func TestPolicyWorkersDeterministic(t *testing.T) {
	const services = 8
	type outcome struct {
		Table      []string
		Changed    []model.ServiceKey
		Events     []plugintest.Event
		Conditions map[model.ServiceKey]plugintest.Condition
		State      []policystage.Status
	}
	run := func(workers int, reverse bool) (outcome, []int) {
		waitCtx, cancel := context.WithTimeout(context.Background(), barrierWait)
		defer cancel()
		done := make([]chan struct{}, services)
		for i := range done {
			done[i] = make(chan struct{})
		}
		var mu sync.Mutex
		var order []int
		pol := plugintest.NewFunc("p", func(ctx context.Context, in *plugin.PolicyInput) (plugin.PolicyResult, error) {
			i := workerIndex(in)
			defer func() {
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				close(done[i])
			}()
			if reverse && i+1 < services {
				select {
				case <-done[i+1]:
				case <-waitCtx.Done():
					return plugin.PolicyResult{}, fmt.Errorf("svc-%02d: svc-%02d did not end within %v", i, i+1, barrierWait)
				}
			}
			if i%3 == 1 {
				return plugin.PolicyResult{}, fmt.Errorf("svc-%02d refuses", i)
			}
			return weights(uint32(i+1), 1)(ctx, in)
		})
		w := newWorkersLoop(t, services, workers, nil)
		w.pols.Set("p", pol, nil, nil)
		mustSync(t, w.loop)
		return outcome{
			Table: table(w.dry), Changed: w.dry.Stats().LastChanged, Events: w.rep.TakeEvents(),
			Conditions: w.rep.Conditions(), State: w.loop.status,
		}, order
	}

	want, _ := run(1, false)
	got, order := run(services, true)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("one worker vs %d finishing in reverse order (-one +many):\n%s", services, diff)
	}
	var reversed []int
	for i := services - 1; i >= 0; i-- {
		reversed = append(reversed, i)
	}
	if diff := cmp.Diff(reversed, order); diff != "" {
		t.Errorf("the evaluations did not end in reverse order, so the test proved nothing (-want +got):\n%s", diff)
	}
	// The single-worker run itself is what the policy asked for.
	if n := len(want.Events); n != 2*3 {
		t.Errorf("%d Events, want 6 (PolicyFailed and PolicyFallback for svc-01, svc-04, svc-07):\n%v", n, want.Events)
	}
	if diff := cmp.Diff(weightedTable(2, "wrr", 3, 1), want.Table[6:9]); diff != "" {
		t.Errorf("svc-02 (-want +got):\n%s", diff)
	}
}

// panicky is a policy whose Name and Evaluate both panic: the panic of
// the stage's own recovery (which names the policy) must still stay with
// its Service.
type panicky struct{}

func (panicky) Name() string { panic("no name") }

func (panicky) Evaluate(context.Context, *plugin.PolicyInput) (plugin.PolicyResult, error) {
	panic("no result")
}

// TestPolicyWorkerFailuresStayLocal runs Services whose policy panics,
// fails, or panics twice over among healthy ones on several workers: each
// broken Service falls back to uniform weights and says why, and every
// other keeps its policy's result.
func TestPolicyWorkerFailuresStayLocal(t *testing.T) {
	const services = 9
	w := newWorkersLoop(t, services, 3, func(i int) string {
		if i == 7 {
			return "panicky"
		}
		return "p"
	})
	w.pols.Set("p", plugintest.NewFunc("p", func(ctx context.Context, in *plugin.PolicyInput) (plugin.PolicyResult, error) {
		switch i := workerIndex(in); i {
		case 2:
			panic("index out of range")
		case 5:
			return plugin.PolicyResult{}, errors.New("trap")
		default:
			return weights(uint32(i+2), 1)(ctx, in)
		}
	}), nil, nil)
	w.pols.Set("panicky", panicky{}, nil, nil)
	mustSync(t, w.loop)

	var want []string
	for i := range services {
		switch i {
		case 2, 5, 7:
			want = append(want, weightedTable(i, "rr", 1, 1)...)
		default:
			want = append(want, weightedTable(i, "wrr", uint32(i+2), 1)...)
		}
	}
	if diff := cmp.Diff(want, table(w.dry)); diff != "" {
		t.Errorf("dataplane (-want +got):\n%s", diff)
	}
	wantConds := map[model.ServiceKey]plugintest.Condition{}
	for i := range services {
		wantConds[workerKey(i)] = plugintest.Condition{Ready: true, Reason: plugin.ReasonPolicyEvaluated, Message: "policy p evaluated"}
	}
	wantConds[workerKey(2)] = plugintest.Condition{Reason: "EvaluationFailed", Message: "policy p: port http/TCP: policy p panicked: index out of range"}
	wantConds[workerKey(5)] = plugintest.Condition{Reason: "EvaluationFailed", Message: "policy p: port http/TCP: trap"}
	wantConds[workerKey(7)] = plugintest.Condition{Reason: "EvaluationFailed", Message: "policy panicky: evaluation panicked: no name"}
	if diff := cmp.Diff(wantConds, w.rep.Conditions()); diff != "" {
		t.Errorf("conditions (-want +got):\n%s", diff)
	}
	var failed []model.ServiceKey
	for _, e := range w.rep.TakeEvents() {
		if e.Reason == plugin.ReasonPolicyFailed {
			failed = append(failed, e.Service)
		}
	}
	if diff := cmp.Diff([]model.ServiceKey{workerKey(2), workerKey(5), workerKey(7)}, failed); diff != "" {
		t.Errorf("PolicyFailed Events, in key order (-want +got):\n%s", diff)
	}
	if got := testutil.ToFloat64(w.pm.Failures.WithLabelValues("p", plugin.FailureError)); got != 2 {
		t.Errorf("failures{p,error} = %v, want 2", got)
	}
	if got := testutil.ToFloat64(w.pm.Failures.WithLabelValues("panicky", plugin.FailureError)); got != 1 {
		t.Errorf("failures{panicky,error} = %v, want 1", got)
	}
}

// statsDataplane is the dry-run dataplane with scripted statistics reads.
type statsDataplane struct {
	*dryrun.Dataplane
	mu    sync.Mutex
	stats map[model.VirtualServiceKey]map[netip.AddrPort]plugin.EndpointStats
	err   error
	reads int
	asked [][]model.VirtualServiceKey // the keys of every read, sorted
}

var _ plugin.StatsReader = (*statsDataplane)(nil)

func (d *statsDataplane) set(stats map[model.VirtualServiceKey]map[netip.AddrPort]plugin.EndpointStats, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stats, d.err = stats, err
}

func (d *statsDataplane) Stats(keys []model.VirtualServiceKey) (map[model.VirtualServiceKey]map[netip.AddrPort]plugin.EndpointStats, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reads++
	d.asked = append(d.asked, slices.SortedFunc(slices.Values(keys), model.VirtualServiceKey.Compare))
	return d.stats, d.err
}

// TestPolicyStatsReadFailures checks that a failed statistics read is
// counted and that policies then see the last good statistics of what the
// read could not return, and the new ones of what it could.
func TestPolicyStatsReadFailures(t *testing.T) {
	const tick = 10 * time.Second
	dp := &statsDataplane{Dataplane: dryrun.New()}
	var mu sync.Mutex
	seen := map[string]uint32{} // active connections of each Service's first endpoint
	pols := plugintest.NewPolicies("p")
	pols.Set("p", plugintest.NewFunc("p", func(ctx context.Context, in *plugin.PolicyInput) (plugin.PolicyResult, error) {
		mu.Lock()
		seen[in.Service.Key.Name] = in.Endpoints[0].Stats.ActiveConns
		mu.Unlock()
		return weights()(ctx, in)
	}), nil, nil)
	pm := policystage.NewMetrics(nil)
	src := plugintest.NewSource()
	clock := runnertest.NewClock(t0)
	var logs bytes.Buffer // written by Sync only
	loop := newLoop(src, dp, clock.Now, policystage.Config{
		Policies: pols, Metrics: pm, Stats: dp, StatsInterval: tick, Workers: 2, Deadline: generousDeadline,
		Log: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	src.Push(model.Delta{Nodes: map[string]*model.Node{"node-a": nodeA}, Services: map[model.ServiceKey]model.ServiceState{
		webKey: modeltest.State(modeltest.ClusterIP(webKey, "10.96.0.1"), webEndpoints[0]),
		apiKey: modeltest.State(modeltest.ClusterIP(apiKey, "10.96.0.30"), modeltest.Ready("10.244.1.9", "node-a")),
	}})
	src.SetSynced(true)

	web := model.VirtualServiceKey{Addr: modeltest.Addr("10.96.0.1"), Port: 80, Protocol: model.TCP}
	api := model.VirtualServiceKey{Addr: modeltest.Addr("10.96.0.30"), Port: 80, Protocol: model.TCP}
	read := func(webConns, apiConns int) map[model.VirtualServiceKey]map[netip.AddrPort]plugin.EndpointStats {
		out := map[model.VirtualServiceKey]map[netip.AddrPort]plugin.EndpointStats{}
		if webConns >= 0 {
			out[web] = map[netip.AddrPort]plugin.EndpointStats{netip.MustParseAddrPort("10.244.1.2:8080"): {ActiveConns: uint32(webConns)}}
		}
		if apiConns >= 0 {
			out[api] = map[netip.AddrPort]plugin.EndpointStats{netip.MustParseAddrPort("10.244.1.9:8080"): {ActiveConns: uint32(apiConns)}}
		}
		return out
	}
	failed := errors.New("netlink: dump interrupted")
	steps := []struct {
		name         string
		stats        map[model.VirtualServiceKey]map[netip.AddrPort]plugin.EndpointStats
		err          error
		wantSeen     map[string]uint32
		wantFailures float64
	}{
		{"a good read", read(4, 7), nil, map[string]uint32{"web": 4, "api": 7}, 0},
		{"a read that fails whole keeps the last good statistics", nil, failed, map[string]uint32{"web": 4, "api": 7}, 1},
		{"a partial read updates what it returned only", read(2, -1), failed, map[string]uint32{"web": 2, "api": 7}, 2},
		{"a good read replaces everything", read(1, -1), nil, map[string]uint32{"web": 1, "api": 0}, 2},
	}
	for _, s := range steps {
		dp.set(s.stats, s.err)
		clock.Step(tick)
		mustSync(t, loop)
		mu.Lock()
		got := maps.Clone(seen)
		mu.Unlock()
		if diff := cmp.Diff(s.wantSeen, got); diff != "" {
			t.Errorf("%s: active connections the policy saw (-want +got):\n%s", s.name, diff)
		}
		if got := testutil.ToFloat64(pm.StatsReadFailures); got != s.wantFailures {
			t.Errorf("%s: policy_stats_read_failures_total = %v, want %v", s.name, got, s.wantFailures)
		}
	}
	if dp.reads != len(steps) {
		t.Errorf("%d statistics reads, want one per tick (%d)", dp.reads, len(steps))
	}
	// Two failures in a row are logged once, and the recovery once.
	for msg, want := range map[string]int{"level=WARN msg=\"reading the dataplane's statistics": 1, "works again": 1} {
		if got := strings.Count(logs.String(), msg); got != want {
			t.Errorf("%d log lines with %q, want %d:\n%s", got, msg, want, logs.String())
		}
	}
}

// statsBlind is a policy that declares it never reads statistics.
type statsBlind struct{ *plugintest.Func }

func (statsBlind) IgnoresStats() bool { return true }

// TestPolicyTickSkipsStatsBlind checks that a statistics tick neither
// re-evaluates the Services of a policy that ignores statistics nor, when
// no Service's policy uses them, reads the dataplane's statistics; and
// that a read asks only for the virtual services of the Services whose
// policy may use them (a tick's kernel reads grow with those, not with
// every Service).
func TestPolicyTickSkipsStatsBlind(t *testing.T) {
	const tick = 10 * time.Second
	dp := &statsDataplane{Dataplane: dryrun.New()}
	blind := plugintest.NewFunc("blind", weights())
	seeing := plugintest.NewFunc("p", weights())
	pols := plugintest.NewPolicies("p")
	pols.Set("blind", statsBlind{blind}, nil, nil)
	pols.Set("p", seeing, nil, nil)
	src := plugintest.NewSource()
	clock := runnertest.NewClock(t0)
	loop := newLoop(src, dp, clock.Now, policystage.Config{Policies: pols, Stats: dp, StatsInterval: tick, Deadline: generousDeadline})
	service := func(k model.ServiceKey, vip, endpoint, policy string) model.ServiceState {
		st := modeltest.State(modeltest.ClusterIP(k, vip), modeltest.Ready(endpoint, "node-a"))
		st.Service.Policy = policy
		return st
	}
	web := service(webKey, "10.96.0.1", "10.244.1.2", "blind")
	api := service(apiKey, "10.96.0.30", "10.244.1.9", "blind")
	src.Push(model.Delta{Nodes: map[string]*model.Node{"node-a": nodeA},
		Services: map[model.ServiceKey]model.ServiceState{webKey: web, apiKey: api}})
	src.SetSynced(true)

	type counts struct {
		Blind, Seeing, Reads int
		Asked                string // the addresses each read asked for
	}
	steps := []struct {
		name string
		do   func()
		want counts
	}{
		// Nothing is known of the policies before their first evaluation.
		{"first sync", func() {}, counts{Blind: 2, Reads: 1, Asked: "[10.96.0.1 10.96.0.30]"}},
		{"tick, every policy blind", func() { clock.Step(tick) }, counts{Blind: 2, Reads: 1, Asked: "[10.96.0.1 10.96.0.30]"}},
		{"api switches to a policy that reads statistics", func() {
			api.Service.Policy = "p"
			src.Push(model.Delta{Services: map[model.ServiceKey]model.ServiceState{apiKey: api}})
		}, counts{Blind: 2, Seeing: 1, Reads: 1, Asked: "[10.96.0.1 10.96.0.30]"}},
		{"tick: only api is re-evaluated, and read", func() { clock.Step(tick) },
			counts{Blind: 2, Seeing: 2, Reads: 2, Asked: "[10.96.0.1 10.96.0.30] [10.96.0.30]"}},
		{"api back to the blind policy", func() {
			api.Service.Policy = "blind"
			src.Push(model.Delta{Services: map[model.ServiceKey]model.ServiceState{apiKey: api}})
		}, counts{Blind: 3, Seeing: 2, Reads: 2, Asked: "[10.96.0.1 10.96.0.30] [10.96.0.30]"}},
		{"tick, every policy blind again", func() { clock.Step(tick) },
			counts{Blind: 3, Seeing: 2, Reads: 2, Asked: "[10.96.0.1 10.96.0.30] [10.96.0.30]"}},
	}
	for _, s := range steps {
		s.do()
		mustSync(t, loop)
		dp.mu.Lock()
		reads := dp.reads
		var asked []string
		for _, keys := range dp.asked {
			addrs := make([]string, len(keys))
			for i, k := range keys {
				addrs[i] = k.Addr.String()
			}
			asked = append(asked, fmt.Sprint(addrs))
		}
		dp.mu.Unlock()
		got := counts{Blind: blind.Calls(), Seeing: seeing.Calls(), Reads: reads, Asked: strings.Join(asked, " ")}
		if diff := cmp.Diff(s.want, got); diff != "" {
			t.Errorf("%s: evaluations and statistics reads (-want +got):\n%s", s.name, diff)
		}
	}
}
