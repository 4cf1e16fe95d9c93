package policystage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
)

// DefaultDeadline bounds one policy evaluation when Config.Deadline is
// zero: the daemon's default (config.DefaultEvaluationDeadline, which the
// tests keep it equal to).
const DefaultDeadline = 50 * time.Millisecond

// Config is what a Stage drives. Policies is required; the rest may be
// left zero.
type Config struct {
	// Policies resolves each Service's policy.
	Policies plugin.Policies
	// Reporter nil: failures are only counted.
	Reporter plugin.PolicyReporter
	// Metrics nil: unregistered metrics.
	Metrics *Metrics
	// Stats, when set, is read once per statistics tick for the
	// policies' PolicyEndpoint.Stats (core/reconcile sets the
	// dataplane's, when it is a plugin.StatsReader); nil: no statistics.
	Stats plugin.StatsReader
	// Schedulers are the schedulers the dataplane supports (core/reconcile
	// sets the dataplane, when it is a plugin.SchedulerSet): a policy
	// naming another is an invalid result, and a Service on a scheduler
	// that ignores weights moves to its WeightedScheduler when the
	// weights differ. nil: the dataplane names none, so every policy
	// naming a scheduler is invalid and no scheduler is changed.
	Schedulers plugin.SchedulerSet
	// Log nil: discard.
	Log *slog.Logger
	// Deadline bounds one evaluation; 0 means DefaultDeadline.
	Deadline time.Duration
	// Workers bounds how many Services' policies are evaluated at once;
	// 0 means one fewer than runtime.GOMAXPROCS(0), at least 1 (a CPU
	// stays free for the goroutines that enforce deadlines: compiled
	// WebAssembly is not preemptible), and 1 evaluates them one after
	// the other on Weigh's goroutine. The weighted plan does not depend
	// on it.
	Workers int
	// StatsInterval, when non-zero, re-evaluates every policy at most
	// that often (the statistics tick); the daemon triggers the loop at
	// that interval.
	StatsInterval time.Duration
}

// Round is the input of one Weigh: what one Sync of the loop took from
// the watch and what the planner made of it.
type Round struct {
	// Now is when the Sync started.
	Now time.Time
	// Node is this node as the watch last reported it; nil when unknown.
	Node *model.Node
	// Services are the Services the watch changed since the previous
	// round (model.Delta.Services): policies see their annotations and
	// endpoints.
	Services map[model.ServiceKey]model.ServiceState
	// Plan is the planner's whole plan, Changed the keys of the Services
	// whose plan it changed, sorted.
	Plan    *model.Plan
	Changed []model.ServiceKey
}

// Status is a Service's policy and its PolicyReady condition, for the
// loop's /debug/state. It marshals to JSON.
type Status struct {
	Service string `json:"service"` // namespace/name
	Policy  string `json:"policy"`
	// Digest and Revision are the version of the policy the Service
	// runs (plugin.Versioned), empty for a policy without versions: the
	// module's sha256, and where it came from (a ConfigMap's
	// resourceVersion).
	Digest   string `json:"digest,omitempty"`
	Revision string `json:"revision,omitempty"`
	Ready    bool   `json:"ready"`
	Reason   string `json:"reason"`
	// Message says why the policy is not ready (its last error), or
	// that it evaluated.
	Message string `json:"message,omitempty"`
}

// policyStatus is a Service's PolicyReady condition.
type policyStatus struct {
	ready           bool
	reason, message string
}

// groupKey identifies the virtual services of a ServicePlan that share a
// destination set: those of one Service port and traffic locality.
type groupKey struct {
	portName string
	protocol model.Protocol
	local    bool
}

// decision is a policy's result for one group, by endpoint.
type decision struct {
	weights   map[model.EndpointKey]uint32
	scheduler string
	flags     []string
}

// groupDecisions are decisions by group. A Service has a handful of
// groups (one a port and traffic locality), so a slice: a map of one
// entry takes ten times the entry's size (at 10,000 Services the last
// good decisions held 7.5 MB as maps).
type groupDecisions []groupDecision

type groupDecision struct {
	group    groupKey
	decision decision
}

// get returns g's decision.
func (ds groupDecisions) get(g groupKey) (decision, bool) {
	for _, e := range ds {
		if e.group == g {
			return e.decision, true
		}
	}
	return decision{}, false
}

// with returns ds with g's decision set to d; ds, which may be shared,
// is unchanged.
func (ds groupDecisions) with(g groupKey, d decision) groupDecisions {
	out := make(groupDecisions, 0, len(ds)+1)
	for _, e := range ds {
		if e.group != g {
			out = append(out, e)
		}
	}
	return append(out, groupDecision{g, d})
}

// service is everything the stage knows of one Service: what the watch
// last said of it, and what its evaluations found. A Service the watch
// deleted keeps the latter until its plan is gone too (forget).
type service struct {
	// watch is the watch's view; its Service is nil once deleted.
	watch model.ServiceState
	// firstSeen is when each endpoint of watch was first seen, index for
	// index; read only once set (jobs share it).
	firstSeen []time.Time
	// policy is the name the Service's policy last resolved to; blind
	// is set when that policy ignores statistics (plugin.StatsBlind).
	policy string
	blind  bool
	// version is the version of the policy last evaluated, when it has
	// versions (plugin.Versioned).
	version plugin.PolicyVersion
	// standIn is set when an earlier version of the policy stood in for
	// a failed newest one and decided: the statistics tick still
	// re-evaluates the Service.
	standIn bool
	// lastGood are the last good decisions, by group.
	lastGood groupDecisions
	// status is the PolicyReady condition, once evaluated (reported).
	status   policyStatus
	reported bool
}

// Stage folds policy decisions into the planner's plan. Weigh and
// TakeStatus must be called from one goroutine at a time (the loop's
// Sync); while Weigh's workers evaluate, they read the stage and nothing
// writes it.
type Stage struct {
	cfg      Config
	log      *slog.Logger
	deadline time.Duration
	m        *Metrics
	workers  int // evaluations at once
	// schedulers is Config.Schedulers, never nil; the workers read it.
	schedulers plugin.SchedulerSet

	services  map[model.ServiceKey]*service
	touched   []model.ServiceKey // changed in the watch since the last Weigh
	viewDirty bool               // a status or a policy name changed since TakeStatus
	lastTick  time.Time
	// stats is the last read of cfg.Stats, taken on the statistics tick.
	stats        map[model.VirtualServiceKey]map[netip.AddrPort]plugin.EndpointStats
	statsFailing bool // the last read failed
	// loadCounted holds the policies whose current load failure has been
	// counted: a failure is counted once per policy and outcome (a new
	// version that fails too is a new outcome, Policies.Changed), not
	// at every evaluation of every Service that uses the policy.
	loadCounted map[string]bool
	// weighted is the plan Weigh hands out: the planner's plans, with
	// the policies' weights and schedulers. It is the map of the
	// returned model.Plan, so it stays apart from services.
	weighted map[model.ServiceKey]*model.ServicePlan
	// due holds, of the Services whose policy asked to be evaluated
	// again (PolicyResult.Reevaluate), when; sighted the keys of weighted
	// whose policy may read statistics (not plugin.StatsBlind, or not
	// evaluated yet), which the statistics tick evaluates again. Both
	// are kept as evaluations commit, so that a round that takes one
	// change never walks every Service.
	due     map[model.ServiceKey]time.Time
	sighted map[model.ServiceKey]struct{}
	// held holds the Services whose policy was still loading
	// (plugin.ErrPolicyLoading) at their last evaluation: they are not
	// in weighted, and every Weigh resolves them again.
	held map[model.ServiceKey]struct{}
}

// New returns a Stage for cfg.
func New(cfg Config) *Stage {
	s := &Stage{
		cfg:      cfg,
		log:      cfg.Log,
		deadline: cfg.Deadline,
		m:        cfg.Metrics,
		workers:  cfg.Workers,
		services: make(map[model.ServiceKey]*service),
		weighted: make(map[model.ServiceKey]*model.ServicePlan),
		due:      make(map[model.ServiceKey]time.Time),
		sighted:  make(map[model.ServiceKey]struct{}),
		held:     make(map[model.ServiceKey]struct{}),

		loadCounted: make(map[string]bool),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.deadline <= 0 {
		s.deadline = DefaultDeadline
	}
	if s.workers <= 0 {
		s.workers = max(1, runtime.GOMAXPROCS(0)-1)
	}
	if s.m == nil {
		s.m = NewMetrics(nil)
	}
	s.schedulers = cfg.Schedulers
	if s.schedulers == nil {
		s.schedulers = noSchedulers{}
	}
	return s
}

// noSchedulers is the SchedulerSet of a dataplane that names none.
type noSchedulers struct{}

func (noSchedulers) SupportsScheduler(string) bool        { return false }
func (noSchedulers) WeightedScheduler(name string) string { return name }
func (noSchedulers) Schedulers() []string                 { return nil }

// HasSynced reports whether the policies have synced
// (plugin.Policies.HasSynced): the loop does not prune before, and
// Services whose policy is still loading are held back (Held) rather
// than fall back only because a module is still compiling.
func (s *Stage) HasSynced() bool { return s.cfg.Policies.HasSynced() }

// Held returns how many Services Weigh holds back because their policy
// is still loading (plugin.ErrPolicyLoading, only before HasSynced):
// they are in neither its plan nor its changed keys until it resolves
// otherwise, so the loop must not prune with a plan that holds any.
func (s *Stage) Held() int { return len(s.held) }

// blind reports whether k's policy ignores statistics.
func (s *Stage) blind(k model.ServiceKey) bool {
	sv := s.services[k]
	return sv != nil && sv.blind
}

// record keeps the watch's view of the changed Services, which policies
// see.
func (s *Stage) record(services map[model.ServiceKey]model.ServiceState, now time.Time) {
	for k, st := range services {
		s.touched = append(s.touched, k)
		sv := s.services[k]
		if st.Service == nil {
			if sv != nil {
				sv.watch, sv.firstSeen = model.ServiceState{}, nil
			}
			continue
		}
		if sv == nil {
			sv = &service{}
			s.services[k] = sv
		}
		sv.firstSeen = firstSeen(sv.watch.Endpoints, sv.firstSeen, st.Endpoints, now)
		sv.watch = st
	}
}

// firstSeen returns when each of eps was first seen, index for index:
// when an endpoint of the same identity in old was (oldAt, index for
// index), now for the others. It returns oldAt itself when eps has old's
// identities in old's order (a change of readiness or of a label).
func firstSeen(old []model.Endpoint, oldAt []time.Time, eps []model.Endpoint, now time.Time) []time.Time {
	if len(eps) == 0 {
		return nil
	}
	if len(oldAt) != len(old) { // not the pair record keeps: nothing known
		old = nil
	}
	if len(old) == len(eps) && slices.EqualFunc(old, eps, func(a, b model.Endpoint) bool { return a.Key() == b.Key() }) {
		return oldAt
	}
	prev := make(map[model.EndpointKey]time.Time, len(old))
	for i, ep := range old {
		if _, ok := prev[ep.Key()]; !ok {
			prev[ep.Key()] = oldAt[i]
		}
	}
	at := make([]time.Time, len(eps))
	for i, ep := range eps {
		if t, ok := prev[ep.Key()]; ok {
			at[i] = t
		} else {
			at[i] = now
		}
	}
	return at
}

// Weigh evaluates the policies of the Services that need it: those the
// planner or the watch changed, those whose policy changed, those whose
// Reevaluate interval passed, those held back, and all on a statistics
// tick. It returns the keys whose weighted plan changed, sorted, and the
// weighted plan: the stage's, read-only, valid until the next Weigh. A
// policy's failure stays with its Service, which falls back; a Service
// whose policy is still loading is held back (Held); Weigh itself never
// fails.
func (s *Stage) Weigh(ctx context.Context, r Round) ([]model.ServiceKey, *model.Plan) {
	s.record(r.Services, r.Now)
	now, p := r.Now, r.Plan
	dirty := make(map[model.ServiceKey]bool, len(r.Changed))
	for _, k := range r.Changed {
		dirty[k] = true
	}
	// A Service's annotations or endpoints may change its policy's
	// decision without changing the planner's plan.
	for _, k := range s.touched {
		dirty[k] = true
	}
	s.touched = s.touched[:0]
	if names := s.cfg.Policies.Changed(); len(names) > 0 {
		for _, n := range names {
			delete(s.loadCounted, n)
		}
		for k, sv := range s.services {
			if sv.policy != "" && slices.Contains(names, sv.policy) {
				dirty[k] = true
			}
		}
	}
	for k, at := range s.due {
		if !now.Before(at) {
			dirty[k] = true
		}
	}
	for k := range s.held {
		dirty[k] = true
	}
	if iv := s.cfg.StatsInterval; iv > 0 && now.Sub(s.lastTick) >= iv {
		s.lastTick = now
		// A failing Service (unless an earlier version of its policy
		// stands in and decides) waits for a change of its own or of its
		// policy: a module that overruns its deadline would otherwise
		// cost every tick a deadline per Service. A Service whose
		// policy ignores statistics has nothing to learn from a tick,
		// and the statistics are read only if a Service evaluated now
		// may use them (one not yet evaluated may).
		read := false
		for k := range s.sighted {
			sv := s.services[k]
			read = true
			if sv == nil || !sv.reported || sv.status.ready || sv.standIn {
				dirty[k] = true
			}
		}
		for k := range dirty {
			read = read || !s.blind(k)
		}
		if read {
			s.readStats(p, dirty)
		}
	}
	var out []model.ServiceKey
	jobs := make([]evalJob, 0, len(dirty))
	for _, k := range slices.SortedFunc(maps.Keys(dirty), model.ServiceKey.Compare) {
		base := p.Services[k]
		if base == nil {
			if _, had := s.weighted[k]; had {
				out = append(out, k)
			}
			delete(s.weighted, k)
			delete(s.sighted, k)
			delete(s.held, k)
			s.forget(k)
			continue
		}
		j := s.prepare(k, base)
		if errors.Is(j.err, plugin.ErrPolicyLoading) {
			// Neither a failure nor a fallback: the module may be
			// compiling. Whatever the dataplane has of it stays.
			s.held[k] = struct{}{}
			continue
		}
		delete(s.held, k)
		jobs = append(jobs, j)
	}
	// The workers only read the stage; what they found is committed
	// below, on this goroutine and in key order, so the plan, the Events
	// and the conditions do not depend on which evaluation ended first.
	s.run(len(jobs), func(i int) { jobs[i].out = s.evaluate(ctx, now, r.Node, &jobs[i]) })
	for i := range jobs {
		j := &jobs[i]
		old, had := s.weighted[j.key]
		w := s.commit(now, j)
		s.weighted[j.key] = w
		if s.blind(j.key) {
			delete(s.sighted, j.key)
		} else {
			s.sighted[j.key] = struct{}{}
		}
		if !had || !w.Equal(old) {
			out = append(out, j.key)
		}
	}
	slices.SortFunc(out, model.ServiceKey.Compare)
	return out, &model.Plan{Services: s.weighted}
}

// run calls fn(i) for every i below n on at most s.workers goroutines,
// and returns once every call has. With one worker, or one call, it
// calls fn on the caller's goroutine.
func (s *Stage) run(n int, fn func(i int)) {
	workers := min(s.workers, n)
	if workers <= 1 {
		for i := range n {
			fn(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				fn(i)
			}
		})
	}
	wg.Wait()
}

// readStats replaces the statistics policies see of the virtual services
// of the dirty Services whose policy may use them (so a tick's kernel
// reads grow with the Services evaluated, not with every Service) with
// the dataplane's current ones, and drops those of virtual services no
// longer in plan p. A failed read is counted and logged, and replaces
// only what it could read: a virtual service whose read failed keeps its
// last good statistics (rather than showing no connections, which would
// send a least-connections policy's traffic its way) until a read
// succeeds.
func (s *Stage) readStats(p *model.Plan, dirty map[model.ServiceKey]bool) {
	if s.cfg.Stats == nil {
		return
	}
	var keys []model.VirtualServiceKey
	live := make(map[model.VirtualServiceKey]bool, len(s.stats))
	for k, sp := range p.Services {
		read := dirty[k] && !s.blind(k)
		for _, vs := range sp.VirtualServices {
			live[vs.VirtualServiceKey] = true
			if read {
				keys = append(keys, vs.VirtualServiceKey)
			}
		}
	}
	stats, err := s.cfg.Stats.Stats(keys)
	if err == nil {
		if s.statsFailing {
			s.log.Info("reading the dataplane's statistics for policies works again")
		}
		s.statsFailing = false
	} else {
		s.m.StatsReadFailures.Inc()
		// Logged when reads start failing; the metric counts every failure.
		if !s.statsFailing {
			s.log.Warn("reading the dataplane's statistics for policies; keeping the last good ones of what failed", "err", err)
		}
		s.statsFailing = true
	}
	// A new map: the reader may keep the one it returned.
	merged := make(map[model.VirtualServiceKey]map[netip.AddrPort]plugin.EndpointStats, len(s.stats)+len(keys))
	for k, v := range s.stats {
		if live[k] {
			merged[k] = v
		}
	}
	for _, k := range keys {
		if st, ok := stats[k]; ok {
			merged[k] = st
		} else if err == nil {
			delete(merged, k) // not programmed
		}
	}
	s.stats = merged
}

// forget drops what the stage found of a Service whose plan is gone,
// and the Service itself once the watch has deleted it too.
func (s *Stage) forget(k model.ServiceKey) {
	s.viewDirty = true
	delete(s.due, k)
	sv := s.services[k]
	if sv == nil {
		return
	}
	if sv.reported && s.cfg.Reporter != nil {
		s.cfg.Reporter.PolicyCondition(k, true, "", "")
	}
	if sv.watch.Service == nil {
		delete(s.services, k)
		return
	}
	s.services[k] = &service{watch: sv.watch, firstSeen: sv.firstSeen}
}

// evalJob is one Service's evaluation in a round. prepare fills the
// inputs on Weigh's goroutine; evaluate, on a worker, fills out.
type evalJob struct {
	key  model.ServiceKey
	base *model.ServicePlan
	st   model.ServiceState
	seen []time.Time    // when st's endpoints were first seen, index for index; read only
	good groupDecisions // the last good decisions; read only

	// What Resolve returned: pol is nil when err is set, unless an
	// earlier version of the policy stands in; version is pol's.
	name    string
	pol     plugin.Policy
	params  []byte
	err     error
	version plugin.PolicyVersion

	out evalOutcome
}

// evalOutcome is what one Service's evaluation found, for commit.
type evalOutcome struct {
	plan       *model.ServicePlan
	failure    error
	failReason string
	fallbacks  []string
	// good, when not nil, replaces the Service's last good decisions.
	good   groupDecisions
	reeval time.Duration
}

// prepare resolves k's policy (Policies is only called from Weigh's
// goroutine) and gathers what evaluate reads.
func (s *Stage) prepare(k model.ServiceKey, base *model.ServicePlan) evalJob {
	j := evalJob{key: k, base: base}
	sv := s.services[k]
	if sv != nil {
		j.st, j.seen = sv.watch, sv.firstSeen
	}
	if j.st.Service == nil || len(base.VirtualServices) == 0 {
		return j
	}
	j.name, j.pol, j.params, j.err = s.cfg.Policies.Resolve(j.st.Service)
	if j.pol != nil && j.st.Service.PolicyParams != "" {
		j.params = []byte(j.st.Service.PolicyParams)
	}
	if v, ok := j.pol.(plugin.Versioned); ok {
		j.version = v.PolicyVersion()
	}
	// A policy that is gone takes its last good result with it.
	if !errors.Is(j.err, plugin.ErrNoPolicy) {
		j.good = sv.lastGood
	}
	return j
}

// evaluate returns j's base plan with the decisions of its policy folded
// in. A failure falls back per group; commit reports it, and it never
// fails the sync. It runs on a worker: it reads the stage, writes none of
// it, and turns a panic into a failure of this Service alone.
func (s *Stage) evaluate(ctx context.Context, now time.Time, node *model.Node, j *evalJob) (out evalOutcome) {
	if j.st.Service == nil || len(j.base.VirtualServices) == 0 {
		return evalOutcome{plan: j.base}
	}
	defer func() {
		if v := recover(); v != nil {
			s.m.Failures.WithLabelValues(j.name, plugin.FailureError).Inc()
			out = evalOutcome{plan: j.base, failure: fmt.Errorf("evaluation panicked: %v", v), failReason: plugin.FailureError,
				fallbacks: []string{"every port: uniform weights"}}
		}
	}()
	if j.err != nil { // counted by commit, once per failure
		out.failure, out.failReason = j.err, plugin.FailureLoad
	}
	var decisions groupDecisions
	good := j.good
	for _, vs := range j.base.VirtualServices {
		g := groupKey{vs.PortName, vs.Protocol, vs.Local}
		if _, done := decisions.get(g); done || len(vs.Destinations) == 0 {
			continue
		}
		in := s.input(now, node, j.st, j.seen, j.base, vs, j.params)
		if j.pol != nil {
			d, re, err := s.evaluateGroup(ctx, j.name, j.pol, in)
			if err == nil {
				decisions = append(decisions, groupDecision{g, d})
				if j.err != nil { // an earlier version stands in
					out.fallbacks = append(out.fallbacks, fmt.Sprintf("port %s: %s", portLabel(vs), lastGoodVersion(j.version)))
				}
				good = good.with(g, d)
				out.good = good
				if re > 0 && (out.reeval == 0 || re < out.reeval) {
					out.reeval = re
				}
				continue
			}
			if out.failure == nil {
				out.failure, out.failReason = fmt.Errorf("port %s: %w", portLabel(vs), err), plugin.FailureReason(err)
			}
			s.m.Failures.WithLabelValues(j.name, plugin.FailureReason(err)).Inc()
		}
		// Fall back: the last good decision when it covers the same
		// endpoints, else the planner's uniform weights.
		if d, ok := good.get(g); ok && sameEndpoints(d, in.Endpoints) {
			decisions = append(decisions, groupDecision{g, d})
			out.fallbacks = append(out.fallbacks, fmt.Sprintf("port %s: the last good result", portLabel(vs)))
		} else {
			out.fallbacks = append(out.fallbacks, fmt.Sprintf("port %s: uniform weights", portLabel(vs)))
		}
	}
	out.plan = fold(j.base, decisions, j.st.Service.Scheduler != "", s.schedulers)
	return out
}

// lastGoodVersion describes the version standing in for a policy whose
// newest version failed.
func lastGoodVersion(v plugin.PolicyVersion) string {
	if v.Digest == "" {
		return "the last good version of the policy"
	}
	return "the last good version of the policy, sha256 " + v.Digest[:min(len(v.Digest), 12)]
}

// commit records what evaluate found for j in the stage, reports it,
// and returns j's weighted plan. It runs on Weigh's goroutine.
func (s *Stage) commit(now time.Time, j *evalJob) *model.ServicePlan {
	k := j.key
	sv := s.services[k]
	delete(s.due, k)
	if j.st.Service == nil || len(j.base.VirtualServices) == 0 {
		return j.base
	}
	// j.st came from sv: sv is not nil.
	if sv.policy != j.name || sv.version != j.version {
		sv.policy, sv.version = j.name, j.version
		s.viewDirty = true
	}
	if errors.Is(j.err, plugin.ErrNoPolicy) {
		sv.lastGood = nil
	}
	switch {
	case j.err == nil:
		delete(s.loadCounted, j.name)
	case !s.loadCounted[j.name]:
		s.loadCounted[j.name] = true
		s.m.Failures.WithLabelValues(j.name, plugin.FailureLoad).Inc()
	}
	b, ok := j.pol.(plugin.StatsBlind)
	sv.blind = ok && j.err == nil && b.IgnoresStats()
	if j.out.good != nil {
		sv.lastGood = j.out.good
	}
	sv.standIn = j.err != nil && j.pol != nil && j.out.good != nil
	if j.out.reeval > 0 {
		s.due[k] = now.Add(j.out.reeval)
	}
	s.report(k, sv, j.name, j.st.Service.Policy != "", j.out.failure, j.out.failReason, j.out.fallbacks)
	return j.out.plan
}

// evaluateGroup runs the policy for one group under the deadline and
// checks its result.
func (s *Stage) evaluateGroup(ctx context.Context, name string, pol plugin.Policy, in *plugin.PolicyInput) (decision, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, s.deadline)
	defer cancel()
	start := time.Now()
	res, err := safeEvaluate(ctx, pol, in)
	s.m.Duration.WithLabelValues(name).Observe(time.Since(start).Seconds())
	if err == nil {
		err = plugin.CheckResult(res, len(in.Endpoints), s.schedulers)
	}
	if err == nil && ctx.Err() != nil && !builtin(pol) {
		err = fmt.Errorf("policy returned after its deadline of %v: %w", s.deadline, context.DeadlineExceeded)
	}
	if err != nil {
		s.m.Evaluations.WithLabelValues(name, ResultFailure).Inc()
		return decision{}, 0, err
	}
	s.m.Evaluations.WithLabelValues(name, ResultSuccess).Inc()
	d := decision{weights: make(map[model.EndpointKey]uint32, len(in.Endpoints)), scheduler: res.Scheduler, flags: slices.Clone(res.Flags)}
	for i := range in.Endpoints {
		d.weights[in.Endpoints[i].Key()] = res.Weights[i]
	}
	return d, res.Reevaluate, nil
}

// builtin reports whether pol is one of the daemon's own policies
// (plugin.Builtin), whose late result stands.
func builtin(pol plugin.Policy) bool {
	b, ok := pol.(plugin.Builtin)
	return ok && b.Builtin()
}

// safeEvaluate turns a panic of an in-process policy into an error, so
// that it fails that Service only.
func safeEvaluate(ctx context.Context, pol plugin.Policy, in *plugin.PolicyInput) (res plugin.PolicyResult, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("policy %s panicked: %v", pol.Name(), v)
		}
	}()
	return pol.Evaluate(ctx, in)
}

// report updates k's PolicyReady condition and sends Events when it
// changes. explicit is set when the Service names its policy.
func (s *Stage) report(k model.ServiceKey, sv *service, name string, explicit bool, failure error, reason string, fallbacks []string) {
	next := policyStatus{ready: true, reason: plugin.ReasonPolicyEvaluated, message: fmt.Sprintf("policy %s evaluated", name)}
	if failure != nil {
		next = policyStatus{reason: policyConditionReason(reason), message: fmt.Sprintf("policy %s: %v", name, failure)}
	}
	prev, had := sv.status, sv.reported
	if had && prev == next {
		return
	}
	sv.status, sv.reported = next, true
	s.viewDirty = true
	r := s.cfg.Reporter
	// A Service that names no policy and works needs no condition: that
	// would be a status write per Service and node at start.
	if r == nil || (failure == nil && !explicit && (!had || prev.ready)) {
		return
	}
	if failure != nil {
		r.PolicyEvent(k, plugin.ReasonPolicyFailed, next.message)
		if len(fallbacks) > 0 {
			r.PolicyEvent(k, plugin.ReasonPolicyFallback, "balancing with "+strings.Join(fallbacks, ", "))
		}
	}
	r.PolicyCondition(k, next.ready, next.reason, next.message)
}

// policyConditionReason turns a failure reason into a condition reason
// (CamelCase, as Kubernetes conditions want).
func policyConditionReason(failure string) string {
	switch failure {
	case plugin.FailureLoad:
		return "LoadFailed"
	case plugin.FailureDeadline:
		return "DeadlineExceeded"
	case plugin.FailureTrap:
		return "Trapped"
	case plugin.FailureDeclined:
		return "Declined"
	case plugin.FailureInvalidOutput:
		return "InvalidOutput"
	}
	return "EvaluationFailed"
}

// input builds what the policy sees of one group: the endpoints among the
// group's destinations, sorted by address then port, with their statistics
// as of the last tick. An endpoint's statistics are summed over every
// virtual service of base with the group's port name and protocol (the
// ClusterIP, NodePorts, LoadBalancer and external IPs, of either traffic
// locality): they are all traffic this node sends to that endpoint, which
// is what a least-connections policy must compare.
func (s *Stage) input(now time.Time, node *model.Node, st model.ServiceState, seen []time.Time, base *model.ServicePlan, vs model.VirtualService, params []byte) *plugin.PolicyInput {
	in := &plugin.PolicyInput{Service: st.Service, Node: node, Now: now, Params: params}
	for _, p := range st.Service.Ports {
		if p.Name == vs.PortName && p.Protocol == vs.Protocol {
			in.Port = p
			break
		}
	}
	in.Endpoints = make([]plugin.PolicyEndpoint, 0, len(vs.Destinations))
	for _, d := range vs.Destinations {
		i := slices.IndexFunc(st.Endpoints, func(ep model.Endpoint) bool {
			return ep.Addr == d.Addr && ep.Port == d.Port && ep.Protocol == vs.Protocol && ep.PortName == vs.PortName
		})
		if i < 0 {
			continue
		}
		ep := plugin.PolicyEndpoint{Endpoint: st.Endpoints[i]}
		if i < len(seen) {
			ep.FirstSeen = seen[i]
		}
		if s.stats != nil {
			ep.Stats = s.endpointStats(base, vs, netip.AddrPortFrom(d.Addr, d.Port))
		}
		if node != nil {
			ep.Local = ep.NodeName != "" && ep.NodeName == node.Name
			ep.SameZone = ep.Zone != "" && ep.Zone == node.Zone
		}
		in.Endpoints = append(in.Endpoints, ep)
	}
	return in
}

// endpointStats sums dst's statistics over the virtual services of base
// that share vs's port name and protocol.
func (s *Stage) endpointStats(base *model.ServicePlan, vs model.VirtualService, dst netip.AddrPort) plugin.EndpointStats {
	var sum plugin.EndpointStats
	for _, o := range base.VirtualServices {
		if o.PortName != vs.PortName || o.Protocol != vs.Protocol {
			continue
		}
		st, ok := s.stats[o.VirtualServiceKey][dst]
		if !ok {
			continue
		}
		sum.ActiveConns = addSat32(sum.ActiveConns, st.ActiveConns)
		sum.InactiveConns = addSat32(sum.InactiveConns, st.InactiveConns)
		sum.ConnRate = addSat32(sum.ConnRate, st.ConnRate)
		sum.BytesInRate += st.BytesInRate
		sum.BytesOutRate += st.BytesOutRate
	}
	return sum
}

// addSat32 adds without wrapping.
func addSat32(a, b uint32) uint32 {
	if a > math.MaxUint32-b {
		return math.MaxUint32
	}
	return a + b
}

func sameEndpoints(d decision, eps []plugin.PolicyEndpoint) bool {
	if len(d.weights) != len(eps) {
		return false
	}
	for i := range eps {
		if _, ok := d.weights[eps[i].Key()]; !ok {
			return false
		}
	}
	return true
}

// fold returns base with decisions applied; base itself when they change
// nothing. A policy's scheduler replaces the planner's; without one, a
// Service on a scheduler that ignores weights moves to the dataplane's
// WeightedScheduler of it when the weights differ (IPVS: rr to wrr; a
// scheduler the switchyard.dev/scheduler annotation chose is kept).
func fold(base *model.ServicePlan, decisions groupDecisions, pinned bool, schedulers plugin.SchedulerSet) *model.ServicePlan {
	var vss []model.VirtualService
	for i, vs := range base.VirtualServices {
		d, ok := decisions.get(groupKey{vs.PortName, vs.Protocol, vs.Local})
		if !ok {
			continue
		}
		next := vs
		next.Destinations = make([]model.Destination, len(vs.Destinations))
		for j, dst := range vs.Destinations {
			if w, known := d.weights[model.EndpointKey{Addr: dst.Addr, Port: dst.Port, Protocol: vs.Protocol}]; known {
				dst.Weight = w
			}
			next.Destinations[j] = dst
		}
		switch {
		case d.scheduler != "":
			next.Scheduler, next.Flags = d.scheduler, slices.Clone(d.flags)
		case !pinned && unequal(next.Destinations):
			next.Scheduler = schedulers.WeightedScheduler(next.Scheduler)
		}
		if next.Equal(vs) {
			continue
		}
		if vss == nil {
			vss = slices.Clone(base.VirtualServices)
		}
		vss[i] = next
	}
	if vss == nil {
		return base
	}
	out := *base
	out.VirtualServices = vss
	return &out
}

// unequal reports whether the non-zero weights differ.
func unequal(ds []model.Destination) bool {
	var first uint32
	for _, d := range ds {
		switch {
		case d.Weight == 0:
		case first == 0:
			first = d.Weight
		case d.Weight != first:
			return true
		}
	}
	return false
}

func portLabel(vs model.VirtualService) string {
	if vs.PortName != "" {
		return vs.PortName + "/" + vs.Protocol.String()
	}
	return fmt.Sprintf("%d/%s", vs.Port, vs.Protocol)
}

// TakeStatus returns every evaluated Service's Status, sorted by Service,
// when one changed since the previous call; nil otherwise.
func (s *Stage) TakeStatus() []Status {
	if !s.viewDirty {
		return nil
	}
	s.viewDirty = false
	out := []Status{}
	for _, k := range slices.SortedFunc(maps.Keys(s.services), model.ServiceKey.Compare) {
		sv := s.services[k]
		if !sv.reported {
			continue
		}
		st := sv.status
		out = append(out, Status{Service: k.String(), Policy: sv.policy, Digest: sv.version.Digest, Revision: sv.version.Revision,
			Ready: st.ready, Reason: st.reason, Message: st.message})
	}
	return out
}
