package policystage_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/switchyard-lb/switchyard/core/config"
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/model/modeltest"
	"github.com/switchyard-lb/switchyard/core/plan"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/core/plugin/plugintest"
	"github.com/switchyard-lb/switchyard/core/policystage"
	"github.com/switchyard-lb/switchyard/core/runner/runnertest"
	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/ipvs/dryrun"
	"github.com/switchyard-lb/switchyard/ipvs/ipvstest"
)

var (
	t0     = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	webKey = model.ServiceKey{Namespace: "default", Name: "web"}
	apiKey = model.ServiceKey{Namespace: "prod", Name: "api"}
	nodeA  = &model.Node{Name: "node-a", Addresses: []netip.Addr{netip.MustParseAddr("192.168.1.10")}, Ready: true}

	webEndpoints = []model.Endpoint{modeltest.Ready("10.244.1.2", "node-a"), modeltest.Ready("10.244.2.2", "node-b")}
	cmpOpts      = []cmp.Option{cmpopts.EquateEmpty(), cmpopts.EquateComparable(netip.Addr{}, netip.AddrPort{}, netip.Prefix{})}
)

func cat(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// table renders the dataplane with runs of spaces collapsed.
func table(dp *dryrun.Dataplane) []string {
	lines := strings.Split(strings.TrimSpace(dp.String()), "\n")[3:] // skip the 3 title lines
	for i, l := range lines {
		lines[i] = strings.Join(strings.Fields(l), " ")
	}
	return lines
}

// loop drives a Stage as core/reconcile's Sync does, without announcers
// or health checks: it takes the watch's changes, replans them with the
// real planner, weighs the plan, and hands the dataplane the Services
// whose weighted plan changed (everything on the first round, as a full
// Apply). The node is node-a.
type loop struct {
	src     *plugintest.Source
	planner *plan.Planner
	stage   *policystage.Stage
	dp      plugin.Dataplane
	now     func() time.Time
	nodes   map[string]*model.Node
	full    bool // the next Apply is a full one
	// status is the stage's last Status, as the loop's State shows it.
	status []policystage.Status
}

// newLoop wires the stage as core/reconcile and cmd/switchyard do: the
// planner and, when cfg names none, the stage get dp's schedulers.
func newLoop(src *plugintest.Source, dp plugin.Dataplane, now func() time.Time, cfg policystage.Config) *loop {
	sched, _ := dp.(plugin.SchedulerSet)
	if cfg.Schedulers == nil {
		cfg.Schedulers = sched
	}
	return &loop{src: src, planner: plan.New(plan.Options{Schedulers: sched}), stage: policystage.New(cfg), dp: dp, now: now,
		nodes: map[string]*model.Node{}, full: true}
}

// Sync runs one round; it does nothing before the source and the
// policies have synced.
func (l *loop) Sync(ctx context.Context) error {
	if !l.src.HasSynced() || !l.stage.HasSynced() {
		return nil
	}
	d := l.src.Take()
	for name, n := range d.Nodes {
		if n == nil {
			delete(l.nodes, name)
		} else {
			l.nodes[name] = n
		}
	}
	changed := l.planner.Update(l.nodes["node-a"], d.Services)
	changed, p := l.stage.Weigh(ctx, policystage.Round{
		Now: l.now(), Node: l.nodes["node-a"], Services: d.Services, Plan: l.planner.Plan(), Changed: changed,
	})
	if st := l.stage.TakeStatus(); st != nil {
		l.status = st
	}
	if !l.full && len(changed) == 0 {
		return nil
	}
	if err := l.dp.Apply(ctx, plugin.Update{Plan: p, Changed: changed, Full: l.full}); err != nil {
		return err
	}
	l.full = false
	return nil
}

func mustSync(t testing.TB, l *loop) {
	t.Helper()
	if err := l.Sync(context.Background()); err != nil {
		t.Fatalf("Sync: %v", err)
	}
}

// harness is a loop over the dry-run dataplane.
type harness struct {
	src  *plugintest.Source
	dry  *dryrun.Dataplane
	loop *loop
}

func newHarness(t *testing.T) *harness {
	return &harness{src: plugintest.NewSource(), dry: dryrun.New()}
}

// Deadlines of the tests' evaluations: generous, since a deadline that
// passes fails the evaluation and the machine may be loaded, except where
// a test waits for one to pass. A test that counts evaluations or checks
// weights sets one: the default (DefaultDeadline, 50 ms) passed under
// -race at load ~40 (issue 9).
const (
	generousDeadline = 2 * time.Minute
	shortDeadline    = 2 * time.Second
)

// policyHarness is a harness whose loop runs the policy stage over a fake
// policy table, with web on policy "weights" and api on the default.
type policyHarness struct {
	*harness
	pols  *plugintest.Policies
	rep   *plugintest.Reporter
	pm    *policystage.Metrics
	clock *runnertest.Clock
}

func newPolicyHarness(t *testing.T, stats time.Duration) *policyHarness {
	return newPolicyHarnessDeadline(t, stats, generousDeadline)
}

func newPolicyHarnessDeadline(t *testing.T, stats, deadline time.Duration) *policyHarness {
	h := &policyHarness{harness: newHarness(t), pols: plugintest.NewPolicies("uniform"),
		rep: plugintest.NewReporter(), pm: policystage.NewMetrics(nil), clock: runnertest.NewClock(t0)}
	h.pols.Set("uniform", plugintest.NewFunc("uniform", weights()), nil, nil)
	h.loop = newLoop(h.src, h.dry, h.clock.Now, policystage.Config{
		Policies: h.pols, Reporter: h.rep, Metrics: h.pm, Deadline: deadline, StatsInterval: stats,
	})
	return h
}

// TestPolicySchedulers checks that the schedulers a policy may name, and
// the move of rr to a weighted scheduler, are the dataplane's: a smaller
// set than IPVS' refuses a name IPVS accepts as an invalid result, while
// the IPVS set (the dry run's) behaves as it always did.
func TestPolicySchedulers(t *testing.T) {
	smaller := plugintest.NewSchedulers("rr", "wrr", "wlc")
	weighted := func(s string) []string {
		return []string{"TCP 10.96.0.1:80 " + s, "-> 10.244.1.2:8080 Masq 3 0 0", "-> 10.244.2.2:8080 Masq 1 0 0"}
	}
	ready := plugintest.Condition{Ready: true, Reason: plugin.ReasonPolicyEvaluated}
	invalid := plugintest.Condition{Reason: "InvalidOutput"}
	for _, tc := range []struct {
		name       string
		schedulers plugin.SchedulerSet // nil: the dry run's, IPVS'
		scheduler  string              // the policy's; weights are 3, 1
		wantWeb    []string
		wantCond   plugintest.Condition
	}{
		{name: "IPVS: a scheduler IPVS supports", scheduler: "mh", wantWeb: weighted("mh"), wantCond: ready},
		{name: "IPVS: an unknown scheduler", scheduler: "fastest", wantWeb: webUniform, wantCond: invalid},
		{name: "IPVS: rr moves to wrr", wantWeb: webWeighted, wantCond: ready},
		{name: "smaller: a scheduler IPVS supports but it does not", schedulers: smaller, scheduler: "mh", wantWeb: webUniform, wantCond: invalid},
		{name: "smaller: a scheduler it supports", schedulers: smaller, scheduler: "wrr", wantWeb: webWeighted, wantCond: ready},
		{name: "smaller: rr ignores no weights there", schedulers: smaller, wantWeb: weighted("rr"), wantCond: ready},
		{name: "smaller: its own weighted scheduler", schedulers: smaller.WithWeighted("rr", "wlc"), wantWeb: weighted("wlc"), wantCond: ready},
		{name: "none: every scheduler refused", schedulers: plugintest.NewSchedulers(), scheduler: "rr", wantWeb: webUniform, wantCond: invalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &policyHarness{harness: newHarness(t), pols: plugintest.NewPolicies("uniform"),
				rep: plugintest.NewReporter(), pm: policystage.NewMetrics(nil), clock: runnertest.NewClock(t0)}
			h.pols.Set("uniform", plugintest.NewFunc("uniform", weights()), nil, nil)
			h.loop = newLoop(h.src, h.dry, h.clock.Now, policystage.Config{
				Policies: h.pols, Reporter: h.rep, Metrics: h.pm, Deadline: generousDeadline, Schedulers: tc.schedulers,
			})
			h.pols.Set("weights", plugintest.NewFunc("weights", func(ctx context.Context, in *plugin.PolicyInput) (plugin.PolicyResult, error) {
				res, err := weights(3, 1)(ctx, in)
				res.Scheduler = tc.scheduler
				return res, err
			}), nil, nil)
			h.start(t)
			if diff := cmp.Diff(cat(tc.wantWeb, apiTable), table(h.dry)); diff != "" {
				t.Errorf("dataplane (-want +got):\n%s", diff)
			}
			c := h.rep.Conditions()[webKey]
			c.Message = ""
			if diff := cmp.Diff(tc.wantCond, c); diff != "" {
				t.Errorf("web's PolicyReady (-want +got):\n%s", diff)
			}
		})
	}
}

// weights returns a policy function giving the i-th endpoint w[i]; every
// endpoint gets 1 when w is empty.
func weights(w ...uint32) func(context.Context, *plugin.PolicyInput) (plugin.PolicyResult, error) {
	return func(_ context.Context, in *plugin.PolicyInput) (plugin.PolicyResult, error) {
		out := make([]uint32, len(in.Endpoints))
		for i := range out {
			out[i] = 1
			if i < len(w) {
				out[i] = w[i]
			}
		}
		return plugin.PolicyResult{Weights: out}, nil
	}
}

func failing(err error) func(context.Context, *plugin.PolicyInput) (plugin.PolicyResult, error) {
	return func(context.Context, *plugin.PolicyInput) (plugin.PolicyResult, error) {
		return plugin.PolicyResult{}, err
	}
}

func (h *policyHarness) start(t *testing.T) {
	web := modeltest.State(modeltest.ClusterIP(webKey, "10.96.0.1"), webEndpoints...)
	web.Service.Policy = "weights"
	api := modeltest.State(modeltest.ClusterIP(apiKey, "10.96.0.30"), modeltest.Ready("10.244.1.9", "node-a"), modeltest.Ready("10.244.2.9", "node-b"))
	h.src.Push(model.Delta{Nodes: map[string]*model.Node{"node-a": nodeA},
		Services: map[model.ServiceKey]model.ServiceState{webKey: web, apiKey: api}})
	h.src.SetSynced(true)
	mustSync(t, h.loop)
}

var (
	apiTable     = []string{"TCP 10.96.0.30:80 rr", "-> 10.244.1.9:8080 Masq 1 0 0", "-> 10.244.2.9:8080 Masq 1 0 0"}
	webUniform   = []string{"TCP 10.96.0.1:80 rr", "-> 10.244.1.2:8080 Masq 1 0 0", "-> 10.244.2.2:8080 Masq 1 0 0"}
	webWeighted  = []string{"TCP 10.96.0.1:80 wrr", "-> 10.244.1.2:8080 Masq 3 0 0", "-> 10.244.2.2:8080 Masq 1 0 0"}
	webWeighted2 = []string{"TCP 10.96.0.1:80 rr", "-> 10.244.1.2:8080 Masq 5 0 0", "-> 10.244.2.2:8080 Masq 0 0 0"}
)

// TestPolicyStage runs a sequence of policy changes and failures and
// checks after each sync what the dataplane holds, what it was asked to
// change, and what the user was told.
func TestPolicyStage(t *testing.T) {
	h := newPolicyHarness(t, 0)
	h.pols.Set("weights", plugintest.NewFunc("weights", weights(3, 1)), nil, nil)
	h.start(t)
	ready := plugintest.Condition{Ready: true, Reason: plugin.ReasonPolicyEvaluated}

	steps := []struct {
		name        string
		do          func()
		wantTable   []string
		wantChanged []model.ServiceKey // nil: no Apply
		wantEvents  []string           // reasons
		wantWeb     plugintest.Condition
	}{{
		name:      "a policy's weights reach the dataplane, with wrr",
		do:        func() {},
		wantTable: cat(webWeighted, apiTable), wantWeb: ready,
	}, {
		name:      "the same result again changes nothing",
		do:        func() { h.pols.Set("weights", plugintest.NewFunc("weights", weights(3, 1)), nil, nil) },
		wantTable: cat(webWeighted, apiTable), wantWeb: ready,
	}, {
		name:        "a reloaded policy changes its Services only",
		do:          func() { h.pols.Set("weights", plugintest.NewFunc("weights", weights(5, 0)), nil, nil) },
		wantTable:   cat(webWeighted2, apiTable),
		wantChanged: []model.ServiceKey{webKey}, wantWeb: ready,
	}, {
		name:       "a trap falls back to the last good result",
		do:         func() { h.pols.Set("weights", plugintest.NewFunc("weights", failing(errors.New("trap"))), nil, nil) },
		wantTable:  cat(webWeighted2, apiTable),
		wantEvents: []string{plugin.ReasonPolicyFailed, plugin.ReasonPolicyFallback},
		wantWeb:    plugintest.Condition{Reason: "EvaluationFailed", Message: "policy weights: port http/TCP: trap"},
	}, {
		name: "new endpoints while failing: uniform weights",
		do: func() {
			web := modeltest.State(modeltest.ClusterIP(webKey, "10.96.0.1"), webEndpoints[0])
			web.Service.Policy = "weights"
			h.src.Push(model.Delta{Services: map[model.ServiceKey]model.ServiceState{webKey: web}})
		},
		wantTable:   cat([]string{"TCP 10.96.0.1:80 rr", "-> 10.244.1.2:8080 Masq 1 0 0"}, apiTable),
		wantChanged: []model.ServiceKey{webKey},
		wantWeb:     plugintest.Condition{Reason: "EvaluationFailed", Message: "policy weights: port http/TCP: trap"},
	}, {
		name:       "a load failure is reported once more with its reason",
		do:         func() { h.pols.Set("weights", nil, nil, errors.New("garbage bytes")) },
		wantTable:  cat([]string{"TCP 10.96.0.1:80 rr", "-> 10.244.1.2:8080 Masq 1 0 0"}, apiTable),
		wantEvents: []string{plugin.ReasonPolicyFailed, plugin.ReasonPolicyFallback},
		wantWeb:    plugintest.Condition{Reason: "LoadFailed", Message: "policy weights: garbage bytes"},
	}, {
		name: "the policy recovers",
		do: func() {
			h.pols.Set("weights", plugintest.NewFunc("weights", weights(3, 1)), nil, nil)
			web := modeltest.State(modeltest.ClusterIP(webKey, "10.96.0.1"), webEndpoints...)
			web.Service.Policy = "weights"
			h.src.Push(model.Delta{Services: map[model.ServiceKey]model.ServiceState{webKey: web}})
		},
		wantTable:   cat(webWeighted, apiTable),
		wantChanged: []model.ServiceKey{webKey}, wantWeb: ready,
	}, {
		name: "switching the annotation to another policy",
		do: func() {
			web := modeltest.State(modeltest.ClusterIP(webKey, "10.96.0.1"), webEndpoints...)
			h.src.Push(model.Delta{Services: map[model.ServiceKey]model.ServiceState{webKey: web}})
		},
		wantTable:   cat(webUniform, apiTable),
		wantChanged: []model.ServiceKey{webKey}, wantWeb: ready,
	}}
	for _, s := range steps {
		before := h.dry.Stats().Applies
		s.do()
		mustSync(t, h.loop)
		if diff := cmp.Diff(s.wantTable, table(h.dry)); diff != "" {
			t.Errorf("%s: dataplane (-want +got):\n%s", s.name, diff)
		}
		st := h.dry.Stats()
		var gotChanged []model.ServiceKey
		if st.Applies > before {
			gotChanged = st.LastChanged
		}
		if diff := cmp.Diff(s.wantChanged, gotChanged, cmpOpts...); diff != "" {
			t.Errorf("%s: Services handed to the dataplane (-want +got):\n%s", s.name, diff)
		}
		var reasons []string
		for _, e := range h.rep.TakeEvents() {
			if e.Service != webKey {
				t.Errorf("%s: event on %v: %+v", s.name, e.Service, e)
			}
			reasons = append(reasons, e.Reason)
		}
		if diff := cmp.Diff(s.wantEvents, reasons, cmpOpts...); diff != "" {
			t.Errorf("%s: events (-want +got):\n%s", s.name, diff)
		}
		got := h.rep.Conditions()[webKey]
		if s.wantWeb.Ready {
			got.Message = "" // names the policy
		}
		if diff := cmp.Diff(s.wantWeb, got); diff != "" {
			t.Errorf("%s: web's PolicyReady (-want +got):\n%s", s.name, diff)
		}
		if c, ok := h.rep.Conditions()[apiKey]; ok {
			t.Errorf("%s: api (on the default policy, working) has a PolicyReady condition %+v, want none", s.name, c)
		}
	}
	for name, c := range map[string]struct{ got, want float64 }{
		"failures{weights,load}":   {testutil.ToFloat64(h.pm.Failures.WithLabelValues("weights", plugin.FailureLoad)), 1},
		"failures{weights,error}":  {testutil.ToFloat64(h.pm.Failures.WithLabelValues("weights", plugin.FailureError)), 2},
		"evaluations{api,failure}": {testutil.ToFloat64(h.pm.Evaluations.WithLabelValues("uniform", policystage.ResultFailure)), 0},
		"evaluations{web,failure}": {testutil.ToFloat64(h.pm.Evaluations.WithLabelValues("weights", policystage.ResultFailure)), 2},
		"evaluations{web,success}": {testutil.ToFloat64(h.pm.Evaluations.WithLabelValues("weights", policystage.ResultSuccess)), 4},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", name, c.got, c.want)
		}
	}
}

// TestPolicyFailures checks that each kind of failure falls back to
// uniform weights with its reason, and leaves the other Service alone.
func TestPolicyFailures(t *testing.T) {
	for _, tc := range []struct {
		name       string
		fn         func(context.Context, *plugin.PolicyInput) (plugin.PolicyResult, error)
		wantReason string
		wantMetric string
		deadline   time.Duration // 0: generous
	}{{
		name: "deadline",
		fn: func(ctx context.Context, _ *plugin.PolicyInput) (plugin.PolicyResult, error) {
			<-ctx.Done()
			return plugin.PolicyResult{}, ctx.Err()
		},
		wantReason: "DeadlineExceeded", wantMetric: plugin.FailureDeadline, deadline: shortDeadline,
	}, {
		name: "returns after its deadline",
		fn: func(ctx context.Context, in *plugin.PolicyInput) (plugin.PolicyResult, error) {
			<-ctx.Done()
			return weights()(ctx, in)
		},
		wantReason: "DeadlineExceeded", wantMetric: plugin.FailureDeadline, deadline: shortDeadline,
	}, {
		name: "panic",
		fn: func(context.Context, *plugin.PolicyInput) (plugin.PolicyResult, error) {
			panic("index out of range")
		},
		wantReason: "EvaluationFailed", wantMetric: plugin.FailureError,
	}, {
		name: "too few weights",
		fn: func(context.Context, *plugin.PolicyInput) (plugin.PolicyResult, error) {
			return plugin.PolicyResult{Weights: []uint32{4}}, nil
		},
		wantReason: "InvalidOutput", wantMetric: plugin.FailureInvalidOutput,
	}, {
		name: "unknown scheduler",
		fn: func(ctx context.Context, in *plugin.PolicyInput) (plugin.PolicyResult, error) {
			res, _ := weights(2, 1)(ctx, in)
			res.Scheduler = "fastest"
			return res, nil
		},
		wantReason: "InvalidOutput", wantMetric: plugin.FailureInvalidOutput,
	}, {
		name: "weight above IPVS' range",
		fn: func(context.Context, *plugin.PolicyInput) (plugin.PolicyResult, error) {
			return plugin.PolicyResult{Weights: []uint32{1 << 31, 1}}, nil
		},
		wantReason: "InvalidOutput", wantMetric: plugin.FailureInvalidOutput,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			deadline := tc.deadline
			if deadline == 0 {
				deadline = generousDeadline
			}
			h := newPolicyHarnessDeadline(t, 0, deadline)
			h.pols.Set("weights", plugintest.NewFunc("weights", tc.fn), nil, nil)
			h.start(t)
			if diff := cmp.Diff(cat(webUniform, apiTable), table(h.dry)); diff != "" {
				t.Errorf("dataplane (-want +got):\n%s", diff)
			}
			if c := h.rep.Conditions()[webKey]; c.Ready || c.Reason != tc.wantReason {
				t.Errorf("web's PolicyReady = %+v, want False with reason %s", c, tc.wantReason)
			}
			if got := testutil.ToFloat64(h.pm.Failures.WithLabelValues("weights", tc.wantMetric)); got != 1 {
				t.Errorf("failures{weights,%s} = %v, want 1", tc.wantMetric, got)
			}
			if c, ok := h.rep.Conditions()[apiKey]; ok {
				t.Errorf("api's PolicyReady = %+v, want none", c)
			}
		})
	}
}

// TestPolicyInvalidResultAllProblems: an in-process policy's invalid
// result is reported with every problem at once, behind one "invalid
// policy output" prefix, as a WebAssembly module's invalid output is.
func TestPolicyInvalidResultAllProblems(t *testing.T) {
	h := newPolicyHarness(t, 0)
	h.pols.Set("weights", plugintest.NewFunc("weights", func(context.Context, *plugin.PolicyInput) (plugin.PolicyResult, error) {
		return plugin.PolicyResult{Weights: []uint32{1 << 31, 1, 2}, Scheduler: "fastest", Reevaluate: -time.Second}, nil
	}), nil, nil)
	h.start(t)
	c := h.rep.Conditions()[webKey]
	want := "policy weights: port http/TCP: invalid policy output: 3 weights for 2 endpoints; weight 2147483648 of endpoint 0 above 2147483647; " +
		`scheduler "fastest" is not one the dataplane supports; negative re-evaluation interval -1s`
	if c.Ready || c.Reason != "InvalidOutput" || c.Message != want {
		t.Errorf("web's PolicyReady = %+v, want False, InvalidOutput, message\n%s", c, want)
	}
	if got := testutil.ToFloat64(h.pm.Failures.WithLabelValues("weights", plugin.FailureInvalidOutput)); got != 1 {
		t.Errorf("failures{weights,invalid_output} = %v, want 1", got)
	}
}

// TestPolicyReevaluation checks the statistics tick and a policy's
// Reevaluate interval.
func TestPolicyReevaluation(t *testing.T) {
	h := newPolicyHarness(t, 10*time.Second)
	periodic := plugintest.NewFunc("periodic", func(ctx context.Context, in *plugin.PolicyInput) (plugin.PolicyResult, error) {
		res, err := weights(3, 1)(ctx, in)
		res.Reevaluate = 2 * time.Second
		return res, err
	})
	h.pols.Set("weights", periodic, nil, nil)
	uniform := plugintest.NewFunc("uniform", weights())
	h.pols.Set("uniform", uniform, nil, nil)
	h.start(t)
	for _, s := range []struct {
		at                      time.Duration
		wantPeriodic, wantUnifm int
	}{
		{0, 1, 1},
		{time.Second, 1, 1},      // nothing due
		{2 * time.Second, 2, 1},  // web's Reevaluate
		{10 * time.Second, 3, 2}, // the statistics tick
		{11 * time.Second, 3, 2}, // web's next is due at 12s
		{20 * time.Second, 4, 3}, // tick
	} {
		h.clock.StepTo(t0.Add(s.at))
		mustSync(t, h.loop)
		if got, got2 := periodic.Calls(), uniform.Calls(); got != s.wantPeriodic || got2 != s.wantUnifm {
			t.Errorf("at %v: evaluations web %d, api %d; want %d, %d", s.at, got, got2, s.wantPeriodic, s.wantUnifm)
		}
	}
}

// TestPolicyDefaultConditions checks that a Service on the default policy
// gets a condition only once it fails, and True again when it recovers.
func TestPolicyDefaultConditions(t *testing.T) {
	h := newPolicyHarness(t, 0)
	h.pols.Set("weights", plugintest.NewFunc("weights", weights(3, 1)), nil, nil)
	h.start(t)
	if c, ok := h.rep.Conditions()[apiKey]; ok {
		t.Fatalf("api has a condition %+v before any failure", c)
	}
	h.pols.Set("uniform", plugintest.NewFunc("uniform", failing(errors.New("boom"))), nil, nil)
	mustSync(t, h.loop)
	want := plugintest.Condition{Reason: "EvaluationFailed", Message: "policy uniform: port http/TCP: boom"}
	if diff := cmp.Diff(want, h.rep.Conditions()[apiKey]); diff != "" {
		t.Errorf("api's condition after a failure (-want +got):\n%s", diff)
	}
	wantState := []policystage.Status{
		{Service: "default/web", Policy: "weights", Ready: true, Reason: plugin.ReasonPolicyEvaluated, Message: "policy weights evaluated"},
		{Service: "prod/api", Policy: "uniform", Reason: "EvaluationFailed", Message: "policy uniform: port http/TCP: boom"},
	}
	if diff := cmp.Diff(wantState, h.loop.status); diff != "" {
		t.Errorf("State().Policies (-want +got):\n%s", diff)
	}
	h.pols.Set("uniform", plugintest.NewFunc("uniform", weights()), nil, nil)
	mustSync(t, h.loop)
	if c := h.rep.Conditions()[apiKey]; !c.Ready || c.Reason != plugin.ReasonPolicyEvaluated {
		t.Errorf("api's condition after recovery = %+v, want True Evaluated", c)
	}
}

// TestPolicyTickSkipsFailing checks that the statistics tick leaves a
// failing Service alone until it or its policy changes.
func TestPolicyTickSkipsFailing(t *testing.T) {
	h := newPolicyHarness(t, 10*time.Second)
	broken := plugintest.NewFunc("weights", failing(errors.New("boom")))
	h.pols.Set("weights", broken, nil, nil)
	h.start(t)
	steps := []struct {
		name string
		do   func()
		want int
	}{
		{"tick", func() { h.clock.Step(10 * time.Second) }, 1},
		{"the Service changes", func() {
			web := modeltest.State(modeltest.ClusterIP(webKey, "10.96.0.1"), webEndpoints[0])
			web.Service.Policy = "weights"
			h.src.Push(model.Delta{Services: map[model.ServiceKey]model.ServiceState{webKey: web}})
		}, 2},
		{"the policy changes", func() { h.pols.Set("weights", broken, nil, nil) }, 3},
		{"tick again", func() { h.clock.Step(10 * time.Second) }, 3},
	}
	for _, s := range steps {
		s.do()
		mustSync(t, h.loop)
		if got := broken.Calls(); got != s.want {
			t.Errorf("%s: %d evaluations, want %d", s.name, got, s.want)
		}
	}
}

// TestPolicyForgetsDeletedService checks that a deleted Service takes
// everything the stage knew of it along: its condition is cleared, its
// status leaves the state, and when it comes back its policy's last good
// result is gone with it (a failure then falls back to uniform weights).
func TestPolicyForgetsDeletedService(t *testing.T) {
	h := newPolicyHarness(t, 0)
	h.pols.Set("weights", plugintest.NewFunc("weights", weights(3, 1)), nil, nil)
	h.start(t)
	if diff := cmp.Diff(cat(webWeighted, apiTable), table(h.dry)); diff != "" {
		t.Fatalf("dataplane (-want +got):\n%s", diff)
	}
	h.src.Push(model.Delta{Services: map[model.ServiceKey]model.ServiceState{webKey: {}}})
	mustSync(t, h.loop)
	if c, ok := h.rep.Conditions()[webKey]; ok {
		t.Errorf("web's condition after its deletion = %+v, want none", c)
	}
	wantState := []policystage.Status{{Service: "prod/api", Policy: "uniform", Ready: true, Reason: plugin.ReasonPolicyEvaluated, Message: "policy uniform evaluated"}}
	if diff := cmp.Diff(wantState, h.loop.status); diff != "" {
		t.Errorf("status after web's deletion (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(apiTable, table(h.dry)); diff != "" {
		t.Errorf("dataplane after web's deletion (-want +got):\n%s", diff)
	}

	h.pols.Set("weights", plugintest.NewFunc("weights", failing(errors.New("trap"))), nil, nil)
	web := modeltest.State(modeltest.ClusterIP(webKey, "10.96.0.1"), webEndpoints...)
	web.Service.Policy = "weights"
	h.src.Push(model.Delta{Services: map[model.ServiceKey]model.ServiceState{webKey: web}})
	mustSync(t, h.loop)
	if diff := cmp.Diff(cat(webUniform, apiTable), table(h.dry)); diff != "" {
		t.Errorf("web back, its policy failing: dataplane (-want +got):\n%s", diff)
	}
	want := plugintest.Condition{Reason: "EvaluationFailed", Message: "policy weights: port http/TCP: trap"}
	if diff := cmp.Diff(want, h.rep.Conditions()[webKey]); diff != "" {
		t.Errorf("web's condition (-want +got):\n%s", diff)
	}
}

// versioned is a policy that knows its version, as a ConfigMap policy of
// plugins/registry does.
type versioned struct {
	*plugintest.Func
	v plugin.PolicyVersion
}

func (p versioned) PolicyVersion() plugin.PolicyVersion { return p.v }

// TestPolicyStandIn checks a policy whose newest version failed while an
// earlier one stands in: the earlier version is evaluated (new endpoints
// get its weights, not uniform ones), the statistics tick still
// re-evaluates it, the failure is reported, and Status names the version
// each Service runs.
func TestPolicyStandIn(t *testing.T) {
	h := newPolicyHarness(t, 10*time.Second)
	v1 := versioned{plugintest.NewFunc("weights", weights(3, 1, 2)), plugin.PolicyVersion{Digest: strings.Repeat("a1", 32), Revision: "10"}}
	h.pols.Set("weights", v1, nil, nil)
	h.start(t)
	status := func(v plugin.PolicyVersion, ready bool, reason, msg string) []policystage.Status {
		return []policystage.Status{
			{Service: "default/web", Policy: "weights", Digest: v.Digest, Revision: v.Revision, Ready: ready, Reason: reason, Message: msg},
			{Service: "prod/api", Policy: "uniform", Ready: true, Reason: plugin.ReasonPolicyEvaluated, Message: "policy uniform evaluated"},
		}
	}
	if diff := cmp.Diff(status(v1.v, true, plugin.ReasonPolicyEvaluated, "policy weights evaluated"), h.loop.status); diff != "" {
		t.Fatalf("status (-want +got):\n%s", diff)
	}
	h.rep.TakeEvents()

	// v2 fails to load; v1 stands in.
	failed := "garbage (running its last good version, sha256 a1a1a1a1a1a1, instead)"
	h.pols.Set("weights", v1, nil, errors.New(failed))
	web := modeltest.State(modeltest.ClusterIP(webKey, "10.96.0.1"), append(slices.Clone(webEndpoints), modeltest.Ready("10.244.3.2", "node-c"))...)
	web.Service.Policy = "weights"
	h.src.Push(model.Delta{Services: map[model.ServiceKey]model.ServiceState{webKey: web}})
	mustSync(t, h.loop)
	want := cat([]string{"TCP 10.96.0.1:80 wrr", "-> 10.244.1.2:8080 Masq 3 0 0", "-> 10.244.2.2:8080 Masq 1 0 0", "-> 10.244.3.2:8080 Masq 2 0 0"}, apiTable)
	if diff := cmp.Diff(want, table(h.dry)); diff != "" {
		t.Errorf("dataplane with v1 standing in (-want +got):\n%s", diff)
	}
	wantCond := plugintest.Condition{Reason: "LoadFailed", Message: "policy weights: " + failed}
	if diff := cmp.Diff(wantCond, h.rep.Conditions()[webKey]); diff != "" {
		t.Errorf("web's PolicyReady (-want +got):\n%s", diff)
	}
	var events []string
	for _, e := range h.rep.TakeEvents() {
		events = append(events, e.Reason+": "+e.Message)
	}
	wantEvents := []string{
		"PolicyFailed: policy weights: " + failed,
		"PolicyFallback: balancing with port http/TCP: the last good version of the policy, sha256 a1a1a1a1a1a1",
	}
	if diff := cmp.Diff(wantEvents, events); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(status(v1.v, false, "LoadFailed", "policy weights: "+failed), h.loop.status); diff != "" {
		t.Errorf("status with v1 standing in (-want +got):\n%s", diff)
	}
	calls := v1.Calls()
	h.clock.Step(10 * time.Second)
	mustSync(t, h.loop)
	if got := v1.Calls(); got != calls+1 {
		t.Errorf("the statistics tick evaluated the stand-in %d times, want 1", got-calls)
	}

	// v3 loads.
	v3 := versioned{plugintest.NewFunc("weights", weights(5, 0, 0)), plugin.PolicyVersion{Digest: strings.Repeat("c3", 32), Revision: "12"}}
	h.pols.Set("weights", v3, nil, nil)
	mustSync(t, h.loop)
	if diff := cmp.Diff(status(v3.v, true, plugin.ReasonPolicyEvaluated, "policy weights evaluated"), h.loop.status); diff != "" {
		t.Errorf("status after v3 (-want +got):\n%s", diff)
	}
}

// TestPolicyLoadFailuresCountedOnce: a policy that stays broken counts
// one load failure, however many Services use it and however many
// statistics ticks re-evaluate them; a new version that fails too
// counts again, and so does a failure after the policy worked again.
func TestPolicyLoadFailuresCountedOnce(t *testing.T) {
	h := newPolicyHarness(t, 10*time.Second)
	v1 := versioned{plugintest.NewFunc("weights", weights(3, 1)), plugin.PolicyVersion{Digest: strings.Repeat("a1", 32), Revision: "10"}}
	h.pols.Set("weights", v1, nil, nil)
	h.start(t)
	// A second Service on the policy.
	api := modeltest.State(modeltest.ClusterIP(apiKey, "10.96.0.30"), modeltest.Ready("10.244.1.9", "node-a"), modeltest.Ready("10.244.2.9", "node-b"))
	api.Service.Policy = "weights"
	h.src.Push(model.Delta{Services: map[model.ServiceKey]model.ServiceState{apiKey: api}})
	mustSync(t, h.loop)

	loadFailures := func() float64 {
		return testutil.ToFloat64(h.pm.Failures.WithLabelValues("weights", plugin.FailureLoad))
	}
	ticks := func(n int) {
		for range n {
			h.clock.Step(10 * time.Second)
			mustSync(t, h.loop)
		}
	}
	steps := []struct {
		name string
		do   func()
		want float64
	}{
		{"v2 fails to load, v1 stands in, five ticks", func() {
			h.pols.Set("weights", v1, nil, errors.New("v2: garbage (running its last good version)"))
			ticks(5)
		}, 1},
		{"an endpoint change re-evaluates both Services", func() {
			api.Endpoints = api.Endpoints[:1]
			web := modeltest.State(modeltest.ClusterIP(webKey, "10.96.0.1"), webEndpoints[:1]...)
			web.Service.Policy = "weights"
			h.src.Push(model.Delta{Services: map[model.ServiceKey]model.ServiceState{apiKey: api, webKey: web}})
			mustSync(t, h.loop)
		}, 1},
		{"v3 fails too", func() {
			h.pols.Set("weights", v1, nil, errors.New("v3: garbage (running its last good version)"))
			ticks(3)
		}, 2},
		{"v4 loads, v5 fails", func() {
			h.pols.Set("weights", v1, nil, nil)
			ticks(1)
			h.pols.Set("weights", v1, nil, errors.New("v5: garbage (running its last good version)"))
			ticks(3)
		}, 3},
		{"deleted: not found, five ticks", func() {
			h.pols.Set("weights", nil, nil, fmt.Errorf("no ConfigMap: %w", plugin.ErrNoPolicy))
			ticks(5)
		}, 4},
	}
	for _, s := range steps {
		s.do()
		if got := loadFailures(); got != s.want {
			t.Errorf("%s: failures{weights,load} = %v, want %v", s.name, got, s.want)
		}
	}
}

// The stage's default deadline is the daemon's (and so the WebAssembly
// host's and yardctl's): one deadline everywhere.
func TestDefaultDeadlineIsTheDaemons(t *testing.T) {
	if policystage.DefaultDeadline != config.DefaultEvaluationDeadline {
		t.Errorf("policystage.DefaultDeadline %v, config.DefaultEvaluationDeadline %v: keep them equal", policystage.DefaultDeadline, config.DefaultEvaluationDeadline)
	}
}

// leastConns is a least-connections-like policy: each endpoint gets one
// more than the most active connections any endpoint has, less its own.
// It keeps the statistics it saw last.
type leastConns struct {
	mu   sync.Mutex
	seen map[netip.AddrPort]plugin.EndpointStats
}

func (p *leastConns) evaluate(_ context.Context, in *plugin.PolicyInput) (plugin.PolicyResult, error) {
	seen := make(map[netip.AddrPort]plugin.EndpointStats, len(in.Endpoints))
	var most uint32
	for _, ep := range in.Endpoints {
		seen[netip.AddrPortFrom(ep.Addr, ep.Port)] = ep.Stats
		most = max(most, ep.Stats.ActiveConns)
	}
	w := make([]uint32, len(in.Endpoints))
	for i, ep := range in.Endpoints {
		w[i] = most + 1 - ep.Stats.ActiveConns
	}
	p.mu.Lock()
	p.seen = seen
	p.mu.Unlock()
	return plugin.PolicyResult{Weights: w}, nil
}

func (p *leastConns) last() map[netip.AddrPort]plugin.EndpointStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen
}

// TestPolicySeesDataplaneStats runs the loop over the IPVS dataplane on
// the fake kernel: connection counts set in the kernel reach the policy on
// the statistics tick, summed over the Service port's frontends, and the
// weights the kernel holds follow them.
func TestPolicySeesDataplaneStats(t *testing.T) {
	const tick = 10 * time.Second
	kernel := ipvstest.NewFake()
	addrs := ipvstest.NewFakeAddresses()
	addrs.AddLink("eth0", "device")
	node := netip.MustParseAddr("192.168.1.10")
	if err := addrs.AddAddr("eth0", node); err != nil {
		t.Fatal(err)
	}
	dp, err := ipvs.New(ipvs.Config{Kernel: kernel, Addresses: addrs, Sysctls: ipvstest.NewFakeSysctls(map[string]string{
		"net/ipv4/ip_forward": "1", "net/ipv4/vs/conntrack": "1", "net/ipv4/vs/expire_nodest_conn": "1",
		"net/ipv4/vs/expire_quiescent_template": "1", "net/ipv4/vs/conn_reuse_mode": "0",
	})})
	if err != nil {
		t.Fatal(err)
	}
	lc := &leastConns{}
	pols := plugintest.NewPolicies("leastconns")
	fn := plugintest.NewFunc("leastconns", lc.evaluate)
	pols.Set("leastconns", fn, nil, nil)
	src := plugintest.NewSource()
	clock := runnertest.NewClock(t0)
	loop := newLoop(src, dp, clock.Now, policystage.Config{Policies: pols, Stats: dp, StatsInterval: tick, Deadline: generousDeadline})

	eps := []model.Endpoint{modeltest.Ready("10.244.1.2", "node-a"), modeltest.Ready("10.244.2.2", "node-b"), modeltest.Ready("10.244.3.2", "node-c")}
	web := modeltest.State(modeltest.ClusterIP(webKey, "10.96.0.1"), eps...)
	web.Service.Type = model.NodePort
	web.Service.Ports[0].NodePort = 30080
	src.Push(model.Delta{Nodes: map[string]*model.Node{"node-a": nodeA},
		Services: map[model.ServiceKey]model.ServiceState{webKey: web}})
	src.SetSynced(true)
	mustSync(t, loop)

	cip := model.VirtualServiceKey{Addr: modeltest.Addr("10.96.0.1"), Port: 80, Protocol: model.TCP}
	np := model.VirtualServiceKey{Addr: node, Port: 30080, Protocol: model.TCP}
	dst := func(s string) ipvs.DestinationKey {
		ap := netip.MustParseAddrPort(s)
		return ipvs.DestinationKey{Addr: ap.Addr(), Port: ap.Port()}
	}
	setConns := func(k model.VirtualServiceKey, d string, active uint32) {
		t.Helper()
		if err := kernel.SetConns(k, dst(d), active, 1); err != nil {
			t.Fatal(err)
		}
	}
	kernelWeights := func() map[model.VirtualServiceKey][]uint32 {
		out := map[model.VirtualServiceKey][]uint32{}
		for _, e := range kernel.Table() {
			for _, d := range e.Destinations {
				out[e.Service.VirtualServiceKey] = append(out[e.Service.VirtualServiceKey], d.Weight)
			}
		}
		return out
	}
	both := func(w ...uint32) map[model.VirtualServiceKey][]uint32 {
		return map[model.VirtualServiceKey][]uint32{cip: w, np: w}
	}
	// conns is the statistics of the three endpoints, active and
	// inactive connections of each in turn.
	conns := func(a1, i1, a2, i2, a3, i3 uint32) map[netip.AddrPort]plugin.EndpointStats {
		return map[netip.AddrPort]plugin.EndpointStats{
			netip.MustParseAddrPort("10.244.1.2:8080"): {ActiveConns: a1, InactiveConns: i1},
			netip.MustParseAddrPort("10.244.2.2:8080"): {ActiveConns: a2, InactiveConns: i2},
			netip.MustParseAddrPort("10.244.3.2:8080"): {ActiveConns: a3, InactiveConns: i3},
		}
	}
	stats := func(a1, a2, a3, inactive uint32) map[netip.AddrPort]plugin.EndpointStats {
		return conns(a1, inactive, a2, inactive, a3, inactive)
	}
	if diff := cmp.Diff(both(1, 1, 1), kernelWeights()); diff != "" {
		t.Fatalf("before any traffic, kernel weights (-want +got):\n%s", diff)
	}

	steps := []struct {
		name        string
		do          func()
		wantSeen    map[netip.AddrPort]plugin.EndpointStats
		wantWeights map[model.VirtualServiceKey][]uint32
		wantEvals   int // in all
	}{
		{
			name: "a tick reads the counters, summed over the ClusterIP and the NodePort",
			do: func() {
				setConns(cip, "10.244.1.2:8080", 4)
				setConns(cip, "10.244.2.2:8080", 1)
				setConns(np, "10.244.2.2:8080", 1)
				setConns(np, "10.244.3.2:8080", 0)
				clock.Step(tick)
			},
			// Inactive: 1 on each frontend an endpoint was set on.
			wantSeen:    conns(4, 1, 2, 2, 0, 1),
			wantWeights: both(1, 3, 5),
			wantEvals:   2,
		},
		{
			name: "between ticks an evaluation sees the last read, not the kernel",
			do: func() {
				setConns(cip, "10.244.1.2:8080", 0)
				clock.Step(tick / 2)
				src.Push(model.Delta{Services: map[model.ServiceKey]model.ServiceState{webKey: web}})
			},
			wantSeen:    conns(4, 1, 2, 2, 0, 1),
			wantWeights: both(1, 3, 5),
			wantEvals:   3,
		},
		{
			name: "the next tick follows the kernel",
			do: func() {
				setConns(np, "10.244.2.2:8080", 0)
				setConns(np, "10.244.1.2:8080", 0)
				setConns(cip, "10.244.3.2:8080", 0)
				setConns(cip, "10.244.2.2:8080", 0)
				setConns(np, "10.244.3.2:8080", 6)
				clock.Step(tick)
			},
			wantSeen:    stats(0, 0, 6, 2),
			wantWeights: both(7, 7, 1),
			wantEvals:   4,
		},
	}
	for _, s := range steps {
		s.do()
		mustSync(t, loop)
		if diff := cmp.Diff(s.wantSeen, lc.last()); diff != "" {
			t.Errorf("%s: the policy saw (-want +got):\n%s", s.name, diff)
		}
		if diff := cmp.Diff(s.wantWeights, kernelWeights()); diff != "" {
			t.Errorf("%s: kernel weights (-want +got):\n%s", s.name, diff)
		}
		if got := fn.Calls(); got != s.wantEvals {
			t.Errorf("%s: %d evaluations in all, want %d", s.name, got, s.wantEvals)
		}
	}
}

// builtinFunc is a test policy that says it is one of the daemon's own
// (plugin.Builtin), as plugins/builtin's are.
type builtinFunc struct{ *plugintest.Func }

func (builtinFunc) Builtin() bool { return true }

// TestBuiltinLateReturnStands: a built-in policy that returns after the
// evaluation deadline (a busy node: seen at 10,000 Services while a
// WebAssembly module compiled on the guest's one CPU) is not failed: its
// weights stand and nothing is reported; an error it returns still
// fails it. TestPolicyFailures' "returns after its deadline" is the
// same late return from a policy that is not built in.
func TestBuiltinLateReturnStands(t *testing.T) {
	late := func(ctx context.Context, in *plugin.PolicyInput) (plugin.PolicyResult, error) {
		<-ctx.Done()
		return weights(3, 1)(ctx, in)
	}
	for _, tc := range []struct {
		name      string
		fn        func(context.Context, *plugin.PolicyInput) (plugin.PolicyResult, error)
		wantWeb   []string
		wantReady bool
	}{
		{name: "late, with weights", fn: late, wantWeb: webWeighted, wantReady: true},
		{name: "late, with the deadline's error", fn: func(ctx context.Context, _ *plugin.PolicyInput) (plugin.PolicyResult, error) {
			<-ctx.Done()
			return plugin.PolicyResult{}, ctx.Err()
		}, wantWeb: webUniform},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newPolicyHarnessDeadline(t, 0, shortDeadline)
			h.pols.Set("weights", builtinFunc{plugintest.NewFunc("weights", tc.fn)}, nil, nil)
			h.start(t)
			if diff := cmp.Diff(cat(tc.wantWeb, apiTable), table(h.dry)); diff != "" {
				t.Errorf("dataplane (-want +got):\n%s", diff)
			}
			if c := h.rep.Conditions()[webKey]; c.Ready != tc.wantReady {
				t.Errorf("web's PolicyReady = %+v, want ready %v", c, tc.wantReady)
			}
			wantFailures := 1.0
			if tc.wantReady {
				wantFailures = 0
			}
			if got := testutil.ToFloat64(h.pm.Failures.WithLabelValues("weights", plugin.FailureDeadline)); got != wantFailures {
				t.Errorf("failures{weights,deadline} = %v, want %v", got, wantFailures)
			}
		})
	}
}
