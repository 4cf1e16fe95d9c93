package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/switchyard-lb/switchyard/core/election"
	"github.com/switchyard-lb/switchyard/core/healthcheck"
	"github.com/switchyard-lb/switchyard/core/metrics"
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plan"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/core/policystage"
)

// DefaultFullSyncPeriod is how often the loop asks the dataplane for a
// full resync when Config.FullSyncPeriod is unset.
const DefaultFullSyncPeriod = time.Hour

// maxPendingTriggers bounds the trigger times kept while the dataplane
// keeps failing.
const maxPendingTriggers = 10000

// resyncGap is how many times its own duration a periodic resync is
// followed by before the next may start, so that resyncs take at most a
// tenth of the loop's time: a change arriving during one waits for it,
// and at 10,000 Services under emulation one took 29 s of a 30 s
// period.
const resyncGap = 9

// Config is what a Loop drives. Source, Planner and Dataplane are
// required; the rest may be left zero.
type Config struct {
	// NodeName is this node's name: the Node the planner plans for.
	NodeName  string
	Source    plugin.Source
	Planner   *plan.Planner
	Dataplane plugin.Dataplane
	// Elected are the announcers: each announces only the addresses this
	// node wins in its election (elect.go), among the nodes the Source
	// reports.
	Elected []plugin.ElectedAnnouncer
	// Alive, when set, is gossip membership's view of the nodes for the
	// Elected announcers' election; Kubernetes readiness decides
	// otherwise. Trigger a Sync when its answers change.
	Alive election.AliveFunc
	// OnNodes, when set, receives every node the Source reports (a copy,
	// by name) whenever a Sync takes a change of them, before anything is
	// announced: a hook to feed announcers and membership the nodes.
	OnNodes func(map[string]*model.Node)
	// Metrics nil: unregistered metrics.
	Metrics *metrics.Metrics
	// Health nil: no healthCheckNodePort servers.
	Health *healthcheck.Server
	// Log nil: discard.
	Log *slog.Logger
	// Now nil: time.Now.
	Now func() time.Time
	// FullSyncPeriod is the time between full resyncs, whether syncs
	// carry changes or not (a sync without changes, such as a statistics
	// tick, is not a full resync by itself), counted between their
	// starts, and at least half of it from the end of the last one, and
	// nine times as long as the last periodic resync took (resyncs take
	// at most a tenth of the loop's time, however slow); 0 means
	// DefaultFullSyncPeriod. The daemon sets it to syncPeriod.
	// Changes that a periodic resync finds pending are applied on their
	// own before it.
	FullSyncPeriod time.Duration

	// EarlyApply lets the loop program the dataplane while the Source's
	// caches still list, when the Dataplane is a plugin.AddOnlyDataplane
	// and the Source hands out changes before it has synced (core/k8s
	// with Options.Early), and while the policies load: a Sync then plans
	// what arrived and applies it add-only, removing nothing, and
	// announces and serves health checks nothing. A Service whose policy
	// is still loading (plugin.ErrPolicyLoading) is held back: it neither
	// falls back nor has its dataplane state changed. The first Sync after
	// the caches and the policies synced applies everything in full,
	// pruning, as without it.
	EarlyApply bool

	// DSR, when set, drives the dsr side of the dsr frontends the
	// planner plans (model.VirtualService.DSRNodes), after the Dataplane
	// applied their own virtual services and before they are announced;
	// the tables in which this node loses slots go before the Dataplane
	// removes the local endpoints that served them.
	DSR *DSRConfig

	// PolicyStage configures the policy stage; PolicyStage.Policies nil:
	// no policy stage, the planner's weights apply. Its Stats defaults to
	// the Dataplane when that is a plugin.StatsReader, its Schedulers to
	// the Dataplane when that is a plugin.SchedulerSet, its Log to Log.
	PolicyStage policystage.Config
}

// Loop is the reconcile loop. Sync must not run concurrently with itself
// (the runner guarantees it; a mutex makes it safe anyway); State,
// LastSync and SetOptions may be called from any goroutine.
type Loop struct {
	cfg      Config
	log      *slog.Logger
	now      func() time.Time
	m        *metrics.Metrics
	fullSync time.Duration

	syncMu sync.Mutex // serialises Sync; guards the fields below
	nodes  map[string]*model.Node
	// elections holds, per Service, what the Elected announcers'
	// election needs beyond the plan.
	elections map[model.ServiceKey]electionInfo
	// announcers are Config.Elected's, elected their elections.
	announcers []plugin.Announcer
	elected    []*plugin.ElectedAnnouncer
	// needFull is set until a full Apply succeeds: initially and after
	// a failed Apply.
	needFull bool
	// lastFull and lastFullEnd are when the last full Apply that
	// succeeded started and ended.
	lastFull, lastFullEnd time.Time
	// resyncTook is how long the last periodic resync's full Apply took
	// (zero before one): the next waits resyncGap times that.
	resyncTook time.Duration
	triggers   []time.Time // EndpointSlice trigger times not yet applied
	ann        []announcerState
	health     map[model.ServiceKey]healthcheck.Port
	// healthDirty is set when health changed or its last Sync failed;
	// healthCounts are the Services whose health check's port stayed and
	// whose local endpoints changed since the last Sync of health, with
	// their counts (the health checks take them one by one).
	healthDirty  bool
	healthCounts map[model.ServiceKey]int
	counts       counts
	// policies is the policy stage; nil without
	// Config.PolicyStage.Policies.
	policies *policystage.Stage
	// dsr is the dsr stage; nil without Config.DSR.
	dsr *dsrStage
	// announce is the desired announcements, by Service and by address;
	// electedFor[i] is what elect gave Elected[i] for them. A Sync elects
	// again only the addresses it took a change of, unless something
	// every election reads changed (announce.go).
	announce   announceIndex
	electedFor []electCache
	// alive is what gossip membership said of each node at the last
	// Sync; electNodes is set when a change of the nodes changed what
	// the elections read of them, until a Sync elects everything.
	alive      map[string]aliveAnswer
	electNodes bool
	// earlyNodes is set when an early Sync took a change of the nodes
	// that OnNodes and the dsr stage have not seen yet.
	earlyNodes bool

	mu          sync.Mutex // guards the fields below, read by State and LastSync
	dsrView     *DSRState
	desired     map[model.ServiceKey]*model.ServicePlan
	applied     map[model.ServiceKey]*model.ServicePlan
	synced      bool
	announced   map[string][]model.Announcement
	lastSuccess time.Time
	lastErr     error
	pendingOpts *plan.Options
	// pendingFull asks the next Sync for a full apply (RequestFull).
	pendingFull bool
	policyView  []policystage.Status
}

// announcerState is what the loop last sent one announcer.
type announcerState struct {
	sent []model.Announcement
	ok   bool // the last send succeeded; false at start, so the first sync sends
}

// counts are what the dataplane has applied, for metrics.
type counts struct{ services, virtualServices, realServers int }

func (c *counts) add(sp *model.ServicePlan, sign int) {
	if sp == nil || len(sp.VirtualServices) == 0 {
		return
	}
	c.services += sign
	c.virtualServices += sign * len(sp.VirtualServices)
	for _, vs := range sp.VirtualServices {
		c.realServers += sign * len(vs.Destinations)
	}
}

// New returns a Loop for cfg.
func New(cfg Config) *Loop {
	l := &Loop{
		cfg:          cfg,
		log:          cfg.Log,
		now:          cfg.Now,
		m:            cfg.Metrics,
		fullSync:     cfg.FullSyncPeriod,
		nodes:        make(map[string]*model.Node),
		needFull:     true,
		announce:     newAnnounceIndex(),
		alive:        make(map[string]aliveAnswer),
		elections:    make(map[model.ServiceKey]electionInfo),
		ann:          make([]announcerState, len(cfg.Elected)),
		electedFor:   make([]electCache, len(cfg.Elected)),
		health:       make(map[model.ServiceKey]healthcheck.Port),
		healthDirty:  true,
		healthCounts: make(map[model.ServiceKey]int),
		desired:      make(map[model.ServiceKey]*model.ServicePlan),
		applied:      make(map[model.ServiceKey]*model.ServicePlan),
		announced:    make(map[string][]model.Announcement),
	}
	for i := range cfg.Elected {
		l.announcers = append(l.announcers, cfg.Elected[i].Announcer)
		l.elected = append(l.elected, &l.cfg.Elected[i])
	}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	if l.now == nil {
		l.now = time.Now
	}
	if l.m == nil {
		l.m = metrics.New(nil)
	}
	if l.fullSync <= 0 {
		l.fullSync = DefaultFullSyncPeriod
	}
	if cfg.DSR != nil {
		l.dsr = newDSRStage(*cfg.DSR)
	}
	if pc := cfg.PolicyStage; pc.Policies != nil {
		if pc.Stats == nil {
			pc.Stats, _ = cfg.Dataplane.(plugin.StatsReader)
		}
		if pc.Schedulers == nil {
			pc.Schedulers, _ = cfg.Dataplane.(plugin.SchedulerSet)
		}
		if pc.Log == nil {
			pc.Log = l.log
		}
		l.policies = policystage.New(pc)
	}
	return l
}

// SetOptions makes the next Sync replan everything with opts (for a
// configuration reload); trigger the runner afterwards.
func (l *Loop) SetOptions(opts plan.Options) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pendingOpts = &opts
}

// RequestFull makes the next Sync a full apply of the dataplane, when
// something the dataplane holds besides the plan changed (its local
// traffic detector, as a Node's pod CIDRs change): OnNodes may call it
// for the Sync running it. Trigger the runner afterwards otherwise.
func (l *Loop) RequestFull() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pendingFull = true
}

// LastSync returns when the last successful Sync ended (zero before the
// first) and the error of the last Sync (nil when it succeeded or when the
// Source had not synced yet).
func (l *Loop) LastSync() (time.Time, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastSuccess, l.lastErr
}

// SyncResult is what one Sync did.
type SyncResult struct {
	// Ran is unset when Sync returned without acting: the Source, or the
	// policies, had not synced yet.
	Ran bool
	// Full is set when the round was a full resync of the dataplane.
	Full bool
	// Applied is set when the dataplane applied the round (a full resync
	// or changed Services) successfully; unset when there was nothing to
	// apply or the Apply failed.
	Applied bool
	// Changed is the number of Services whose plan the round changed,
	// as handed to the dataplane.
	Changed int
	// Early is set when the round ran before the Source synced
	// (Config.EarlyApply): Ran is unset, and the dataplane, when Applied,
	// only added and updated.
	Early bool
}

// Sync runs one round of reconciliation and says what it did; the
// runner's function calls it. It returns at once, with a zero result and
// nil, while the Source has not synced.
func (l *Loop) Sync(ctx context.Context) (res SyncResult, err error) {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	// Nothing is pruned before every cache and every policy has synced:
	// until then a Sync is early (add-only) or does nothing.
	if !l.cfg.Source.HasSynced() || (l.policies != nil && !l.policies.HasSynced()) {
		if ad, ok := l.cfg.Dataplane.(plugin.AddOnlyDataplane); ok && l.cfg.EarlyApply {
			return l.syncEarly(ctx, ad)
		}
		return SyncResult{}, nil
	}
	res.Ran = true
	start := l.now()
	defer func() {
		end := l.now()
		l.m.SyncDuration.Observe(end.Sub(start).Seconds())
		l.mu.Lock()
		defer l.mu.Unlock()
		l.synced = true
		l.lastErr = err
		if err == nil {
			l.lastSuccess = end
			l.m.LastSyncTimestamp.Set(float64(end.UnixNano()) / 1e9)
		}
	}()

	// 1. Take the changes and replan what they affect.
	d := l.cfg.Source.Take()
	l.takeDelta(d)
	nodesChanged := len(d.Nodes) > 0 || l.earlyNodes
	l.earlyNodes = false
	if nodesChanged && l.cfg.OnNodes != nil {
		l.cfg.OnNodes(maps.Clone(l.nodes))
	}
	l.mu.Lock()
	opts, requested := l.pendingOpts, l.pendingFull
	l.pendingOpts, l.pendingFull = nil, false
	l.mu.Unlock()
	changed := l.cfg.Planner.Update(l.nodes[l.cfg.NodeName], d.Services)
	if opts != nil {
		changed = union(changed, l.cfg.Planner.SetOptions(*opts))
	}
	p := l.cfg.Planner.Plan()
	planned := l.now()
	changed, p = l.weigh(ctx, start, d, p, changed)
	// A resync due by the period alone waits until the last one has been
	// over for half a period, and for resyncGap times the last periodic
	// one's duration, so that resyncs slower than the period (thousands
	// of Services under emulation) do not follow one another and leave
	// the changes most of the loop's time.
	periodic := start.Sub(l.lastFull) >= l.fullSync &&
		start.Sub(l.lastFullEnd) >= max(l.fullSync/2, resyncGap*l.resyncTook)
	full := l.needFull || periodic || requested
	onlyPeriodic := full && !l.needFull && !requested
	res.Full, res.Changed = full, len(changed)
	weighed := l.now()
	// How long the oldest change this round takes waited for it: the
	// watch and the runner's batching, before any of the sync's own work.
	// watch is from that trigger time to when the Source received the
	// oldest change (the API server, the watch, the informer's decode),
	// queued from then to the sync's start (the runner's rate limit and
	// whatever sync ran meanwhile).
	var waited, watch, queued time.Duration
	if len(d.TriggerTimes) > 0 {
		waited = start.Sub(d.TriggerTimes[0]) // sorted
		if !d.Received.IsZero() {
			watch = d.Received.Sub(d.TriggerTimes[0])
		}
	}
	if !d.Received.IsZero() {
		queued = start.Sub(d.Received)
	}
	l.addTriggers(d.TriggerTimes)
	l.track(p, changed, full)
	if l.dsr != nil {
		l.dsr.track(p, changed, full)
		if nodesChanged {
			l.dsr.dirty = true
		}
	}
	l.trackDSRElections(p, changed, full)
	// Every election reads the nodes, gossip's view of them (which may
	// have changed with no change taken) and the options; otherwise only
	// the addresses of the Services whose plan or watched state changed
	// can elect differently.
	args := electArgs{self: l.cfg.NodeName, nodes: l.nodes, infos: l.elections, index: &l.announce}
	var aliveChanged bool
	args.alive, aliveChanged = aliveView(l.cfg.Alive, l.nodes, l.alive)
	for k := range d.Services {
		l.announce.touch(k)
	}
	args.all = full || opts != nil || l.electNodes || aliveChanged
	l.electNodes = false
	args.dirty = l.announce.takeDirty(args.all)
	wants := make([][]model.Announcement, len(l.announcers))
	for i, ea := range l.elected {
		wants[i] = l.electedFor[i].update(ea, &args) // read-only: send copies it
	}

	var errs []error
	// 2. Withdraw what is going away before the dataplane removes it.
	for i, a := range l.announcers {
		st := &l.ann[i]
		if keep, ok := l.electedFor[i].withdrawn(st.sent); ok {
			errs = append(errs, l.send(ctx, i, a, keep)...)
		}
	}

	// 3. Apply. The dsr tables this node serves fewer slots in go first,
	// before the Dataplane removes the local endpoints they served.
	if l.dsr != nil {
		if err := l.dsr.release(l.cfg.NodeName, l.nodes); err != nil {
			l.failed(metrics.StageDataplane, err, "full", full)
			errs = append(errs, err)
		}
		l.setDSRView()
	}
	mode := metrics.ModePartial
	if full {
		mode = metrics.ModeFull
	}
	l.m.Syncs.WithLabelValues(mode).Inc()
	if full && !l.needFull && len(changed) > 0 {
		// The periodic resync can take seconds: the changes go first,
		// on their own, and the resync repairs anything they missed.
		if err := l.cfg.Dataplane.Apply(ctx, plugin.Update{Plan: p, Changed: changed}); err != nil {
			// The resync below retries them.
			l.failed(metrics.StageDataplane, fmt.Errorf("dataplane %s: changes before the periodic resync: %w", l.cfg.Dataplane.Name(), err),
				"full", false, "changed", len(changed))
		} else {
			l.markApplied(changed, false)
			l.m.ObserveProgramming(l.now(), l.triggers)
			l.triggers = l.triggers[:0]
		}
	}
	applyErr := error(nil)
	applyStart := l.now()
	if full || len(changed) > 0 {
		applyErr = l.cfg.Dataplane.Apply(ctx, plugin.Update{Plan: p, Changed: changed, Full: full})
	}
	applied := l.now()
	if applyErr != nil {
		l.needFull = true
		err := fmt.Errorf("dataplane %s: %w", l.cfg.Dataplane.Name(), applyErr)
		l.failed(metrics.StageDataplane, err, "full", full, "changed", len(changed))
		errs = append(errs, err)
	} else {
		res.Applied = full || len(changed) > 0
		if full {
			l.needFull = false
			l.lastFull, l.lastFullEnd = start, l.now()
			if onlyPeriodic {
				l.resyncTook = applied.Sub(applyStart)
			}
		}
		l.markApplied(changed, full)
		l.m.ObserveProgramming(l.now(), l.triggers)
		l.triggers = l.triggers[:0]

		// The dsr side: the frontends' own virtual services exist now.
		if l.dsr != nil {
			if err := l.dsr.sync(l.cfg.NodeName, l.nodes, full); err != nil {
				l.failed(metrics.StageDataplane, err, "full", full)
				errs = append(errs, err)
			}
			l.setDSRView()
		}

		// 4. Announce and report health only once the dataplane serves.
		for i, a := range l.announcers {
			if st := &l.ann[i]; !st.ok || !l.electedFor[i].holds(st.sent) {
				errs = append(errs, l.send(ctx, i, a, wants[i])...)
			}
		}
		if l.cfg.Health != nil && !l.healthDirty {
			// Counts alone: each health check takes its own, so that one
			// change costs the same however many there are.
			for k, n := range l.healthCounts {
				if !l.cfg.Health.SetEndpoints(k, n) {
					l.healthDirty = true // not open: Sync says why
				}
			}
		}
		if len(l.healthCounts) > 0 {
			l.healthCounts = make(map[model.ServiceKey]int)
		}
		if l.cfg.Health != nil && l.healthDirty {
			if err := l.cfg.Health.Sync(maps.Clone(l.health)); err != nil {
				l.failed(metrics.StageHealthCheck, err)
				errs = append(errs, err)
			} else {
				l.healthDirty = false
			}
			l.m.HealthCheckPorts.Set(float64(len(l.cfg.Health.Ports())))
		}
	}
	end := l.now()
	// Where the sync's time went: the planner (with taking the changes),
	// the policy stage, the announcers' withdrawals (and the changes
	// applied ahead of a periodic resync), the dataplane, and announcing
	// and health checks after it.
	l.log.Debug("sync", "full", full, "changed", len(changed), "took", end.Sub(start), "errors", len(errs),
		"waited", waited, "watch", watch, "queued", queued, "plan", planned.Sub(start), "policies", weighed.Sub(planned),
		"withdraw", applyStart.Sub(weighed), "dataplane", applied.Sub(applyStart), "announce", end.Sub(applied))
	return res, errors.Join(errs...)
}

// takeDelta folds the nodes and the election data of d into the loop's.
func (l *Loop) takeDelta(d model.Delta) {
	for name, n := range d.Nodes {
		if !electsAlike(l.nodes[name], n) {
			l.electNodes = true
		}
		if n == nil {
			delete(l.nodes, name)
		} else {
			l.nodes[name] = n
		}
	}
	for k, st := range d.Services {
		if st.Service == nil {
			delete(l.elections, k)
		} else {
			info := electionInfoOf(st)
			info.dsr = l.elections[k].dsr // until its plan says otherwise
			l.elections[k] = info
		}
	}
}

// weigh runs the policy stage, when there is one, over the planner's
// plan p of the round that started at start and took d: the policies
// weigh the planner's plans, and the dataplane sees only the Services
// whose weighted plan changed.
func (l *Loop) weigh(ctx context.Context, start time.Time, d model.Delta, p *model.Plan, changed []model.ServiceKey) ([]model.ServiceKey, *model.Plan) {
	if l.policies == nil {
		return changed, p
	}
	changed, p = l.policies.Weigh(ctx, policystage.Round{
		Now: start, Node: l.nodes[l.cfg.NodeName], Services: d.Services, Plan: p, Changed: changed,
	})
	if view := l.policies.TakeStatus(); view != nil {
		l.mu.Lock()
		l.policyView = view
		l.mu.Unlock()
	}
	return changed, p
}

// addTriggers keeps EndpointSlice trigger times until an Apply
// programs them, at most maxPendingTriggers.
func (l *Loop) addTriggers(ts []time.Time) {
	l.triggers = append(l.triggers, ts...)
	if len(l.triggers) > maxPendingTriggers {
		l.triggers = l.triggers[:maxPendingTriggers]
	}
}

// syncEarly is a Sync before the Source or the policies have synced
// (Config.EarlyApply): it plans what the Source handed out so far and
// applies it add-only, but for the Services the policy stage holds back
// while their policy loads; each early Sync tries those again. It
// records nothing as desired or applied, announces nothing and serves no
// health check: the first full Sync does all of that over the whole
// plan, and prunes.
func (l *Loop) syncEarly(ctx context.Context, ad plugin.AddOnlyDataplane) (SyncResult, error) {
	res := SyncResult{Early: true}
	start := l.now()
	d := l.cfg.Source.Take()
	if d.Empty() && (l.policies == nil || l.policies.Held() == 0) {
		return res, nil
	}
	l.takeDelta(d)
	if len(d.Nodes) > 0 {
		l.earlyNodes = true
	}
	changed := l.cfg.Planner.Update(l.nodes[l.cfg.NodeName], d.Services)
	changed, p := l.weigh(ctx, start, d, l.cfg.Planner.Plan(), changed)
	l.addTriggers(d.TriggerTimes)
	res.Changed = len(changed)
	if len(changed) == 0 {
		return res, nil
	}
	planned := l.now()
	if err := ad.ApplyAddOnly(ctx, plugin.Update{Plan: p, Changed: changed}); err != nil {
		// The first full Sync applies everything anyway.
		err = fmt.Errorf("dataplane %s: add-only, before the caches synced: %w", l.cfg.Dataplane.Name(), err)
		l.failed(metrics.StageDataplane, err, "changed", len(changed))
		return res, err
	}
	res.Applied = true
	l.log.Debug("sync", "early", true, "changed", len(changed), "took", l.now().Sub(start),
		"plan", planned.Sub(start), "dataplane", l.now().Sub(planned))
	return res, nil
}

// trackDSRElections records which changed Services (all on a full
// sync) are in dsr mode, for their election.
func (l *Loop) trackDSRElections(p *model.Plan, changed []model.ServiceKey, full bool) {
	set := func(k model.ServiceKey) {
		if info, ok := l.elections[k]; ok {
			info.dsr = isDSR(p.Services[k])
			l.elections[k] = info
		}
	}
	if full {
		for k := range l.elections {
			set(k)
		}
		return
	}
	for _, k := range changed {
		set(k)
	}
}

// failed counts a failed stage in sync_errors_total and logs its error
// with attrs: the sync is retried, and every failure shows.
func (l *Loop) failed(stage string, err error, attrs ...any) {
	l.m.SyncErrors.WithLabelValues(stage).Inc()
	l.log.Error("sync failed", append([]any{"stage", stage, "err", err}, attrs...)...)
}

// send announces set through announcer i and records the outcome.
func (l *Loop) send(ctx context.Context, i int, a plugin.Announcer, set []model.Announcement) []error {
	st := &l.ann[i]
	st.sent = set
	// A copy: set may be the loop's last election, which the announcer
	// may keep and must not change.
	if err := a.Announce(ctx, slices.Clone(set)); err != nil {
		st.ok = false
		err = fmt.Errorf("announcer %s: %w", a.Name(), err)
		l.failed(metrics.StageAnnounce, err, "addresses", countAddrs(set))
		return []error{err}
	}
	st.ok = true
	l.mu.Lock()
	l.announced[a.Name()] = set
	l.mu.Unlock()
	l.m.AnnouncedIPs.WithLabelValues(a.Name()).Set(float64(countAddrs(set)))
	return nil
}

// track records the new desired state of the changed Services (of all on
// a full sync): the plans for State, the addresses to announce and the
// health checks to serve.
func (l *Loop) track(p *model.Plan, changed []model.ServiceKey, full bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if full {
		clear(l.desired)
		l.announce.reset()
		clear(l.health)
		l.healthDirty = true
		for k, sp := range p.Services {
			l.trackOne(k, sp)
		}
		return
	}
	for _, k := range changed {
		sp := p.Services[k]
		old, had := l.health[k]
		delete(l.desired, k)
		delete(l.health, k)
		if sp != nil {
			l.trackOne(k, sp)
		} else {
			l.announce.set(k, nil)
		}
		switch now, has := l.health[k]; {
		case had == has && old == now:
		case had && has && old.Port == now.Port && l.cfg.Health != nil:
			l.healthCounts[k] = now.LocalEndpoints
		default:
			l.healthDirty = true
		}
	}
}

func (l *Loop) trackOne(k model.ServiceKey, sp *model.ServicePlan) {
	l.desired[k] = sp // the planner replaces plans, never modifies them
	l.announce.set(k, sp.Announce)
	if sp.HealthCheckNodePort != 0 {
		l.health[k] = healthcheck.Port{Port: sp.HealthCheckNodePort, LocalEndpoints: sp.LocalEndpoints}
	}
}

// markApplied records that the dataplane now holds the desired plans of
// the changed Services (of all on a full sync).
func (l *Loop) markApplied(changed []model.ServiceKey, full bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if full {
		l.applied = maps.Clone(l.desired)
		l.counts = counts{}
		for _, sp := range l.applied {
			l.counts.add(sp, 1)
		}
	} else {
		for _, k := range changed {
			l.counts.add(l.applied[k], -1)
			if sp := l.desired[k]; sp != nil {
				l.applied[k] = sp
				l.counts.add(sp, 1)
			} else {
				delete(l.applied, k)
			}
		}
	}
	l.m.ServicesProgrammed.Set(float64(l.counts.services))
	l.m.VirtualServicesProgrammed.Set(float64(l.counts.virtualServices))
	l.m.RealServersProgrammed.Set(float64(l.counts.realServers))
}

// union merges two sorted key lists.
func union(a, b []model.ServiceKey) []model.ServiceKey {
	if len(b) == 0 {
		return a
	}
	out := slices.Concat(a, b)
	slices.SortFunc(out, model.ServiceKey.Compare)
	return slices.Compact(out)
}
