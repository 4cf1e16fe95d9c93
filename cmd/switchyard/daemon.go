package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/switchyard-lb/switchyard/cmd/switchyard/internal/status"
	"github.com/switchyard-lb/switchyard/core/config"
	"github.com/switchyard-lb/switchyard/core/healthcheck"
	"github.com/switchyard-lb/switchyard/core/k8s"
	"github.com/switchyard-lb/switchyard/core/lb"
	"github.com/switchyard-lb/switchyard/core/metrics"
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plan"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/core/policystage"
	"github.com/switchyard-lb/switchyard/core/reconcile"
	"github.com/switchyard-lb/switchyard/core/runner"
	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/ipvs/dryrun"
	"github.com/switchyard-lb/switchyard/plugins/lastgood"
	"github.com/switchyard-lb/switchyard/plugins/registry"
	"github.com/switchyard-lb/switchyard/plugins/wasm"
)

const (
	// configPollInterval is how often the config file is checked for a
	// change. The kubelet refreshes ConfigMap volumes about once a minute,
	// so this adds little delay.
	configPollInterval = 2 * time.Second
	// shutdownTimeout bounds the HTTP servers' graceful shutdown.
	shutdownTimeout = 5 * time.Second
	// maxRetryInterval bounds the wait after a failed sync.
	maxRetryInterval = 5 * time.Second
	// syncBurst is how many syncs may start back to back after a quiet
	// time; minSyncPeriod bounds their average rate (kube-proxy's
	// burstSyncs).
	syncBurst = 2
)

// liveFields are the config fields a reload applies without a restart:
// the planner's options and the IPVS drain timeout.
var liveFields = []string{
	"dataplane.ipvs.scheduler",
	"dataplane.ipvs.drainTimeout",
	"dataplane.nodePortAddresses",
	"dataplane.forwardingMode",
	"loadBalancerClass",
	"ignoreUnclassed",
	"policies.default",
	"pools",
}

// daemonConfig is what runDaemon needs; run builds it from the flags.
type daemonConfig struct {
	Watcher  *config.Watcher
	Client   kubernetes.Interface
	NodeName string
	Log      *slog.Logger
	// NewDataplane nil: the dataplane the config's mode names. It gets
	// the daemon's logger for the dataplane's own messages.
	NewDataplane func(*config.Config, *slog.Logger) (plugin.Dataplane, error)
	// ConfigPollInterval zero: configPollInterval.
	ConfigPollInterval time.Duration
	// Profiling serves net/http/pprof on the metrics listener.
	Profiling bool
	// NewDSR nil: the dsr side on the host's kernel (openDSR) when
	// NewDataplane is nil too and the mode is ipvs, none otherwise.
	NewDSR func(*config.Config) (*reconcile.DSRConfig, func() error, error)
}

// dataplaneMode is one value of dataplane.mode: how its dataplane is
// opened, and the schedulers it supports, known before it is opened so
// that a config naming another is refused at start and on reload.
type dataplaneMode struct {
	open       func(*config.Config, *slog.Logger) (plugin.Dataplane, error)
	schedulers plugin.SchedulerSet
}

var dataplaneModes = map[string]dataplaneMode{
	config.ModeIPVS:   {open: openIPVS, schedulers: ipvs.SchedulerSet},
	config.ModeDryRun: {open: func(*config.Config, *slog.Logger) (plugin.Dataplane, error) { return dryrun.New(), nil }, schedulers: dryrun.SchedulerSet},
}

// announcerTypes are the announcer types the daemon builds, keyed by the
// config's type string. A new type is its package plus one line here,
// such as `types["static"] = static.Type` (core/lb's package doc); the
// config names it with `type: static` and gives its settings under
// `settings:`.
func announcerTypes() lb.Types {
	types := lb.Builtin()
	return types
}

// configChecks are what the daemon checks every config with (at start
// and on each reload) beyond core/config's own validation: what the
// dataplane and the announcer types decide.
func configChecks() []config.Check {
	return []config.Check{checkDataplane, announcerTypes().Check}
}

// checkDataplane validates what the config package leaves to the
// dataplane cfg's mode names (config.Check): its default scheduler.
func checkDataplane(cfg *config.Config) config.Errors {
	m, ok := dataplaneModes[cfg.Dataplane.Mode]
	if !ok {
		return nil // the config's own validation names the mode
	}
	return config.SchedulerCheck(m.schedulers)(cfg)
}

// newDataplane returns the dataplane cfg's mode names, logging to log.
func newDataplane(cfg *config.Config, log *slog.Logger) (plugin.Dataplane, error) {
	m, ok := dataplaneModes[cfg.Dataplane.Mode]
	if !ok {
		return nil, fmt.Errorf("dataplane.mode: unknown mode %q", cfg.Dataplane.Mode)
	}
	return m.open(cfg, log)
}

// ipvsConfig is the IPVS dataplane's configuration from cfg, without
// the kernel handles Open adds.
func ipvsConfig(cfg *config.Config) ipvs.Config {
	ic := cfg.Dataplane.IPVS
	return ipvs.Config{
		Scheduler:     ic.Scheduler,
		StrictARP:     ic.StrictARP == nil || *ic.StrictARP,
		Local:         localDetector(cfg.Dataplane),
		MasqueradeAll: cfg.Dataplane.MasqueradeAll,
		Timeouts:      ipvs.Timeouts{TCP: ic.TCPTimeout.Std(), TCPFin: ic.TCPFinTimeout.Std(), UDP: ic.UDPTimeout.Std()},
		DrainTimeout:  ic.DrainTimeout.Std(),
	}
}

// localDetector is the dataplane's detector of this node's pods for
// dataplane.detectLocal at start. With mode NodeCIDR it detects nothing
// until podCIDRFollower hands the dataplane this node's pod CIDRs. Every
// cluster CIDR is kept (kube-proxy keeps the first of each family).
func localDetector(d config.Dataplane) ipvs.LocalDetector {
	switch d.DetectLocal.Mode {
	case config.LocalModeClusterCIDR:
		return ipvs.LocalDetector{CIDRs: config.Prefixes(d.ClusterCIDRs)}
	case config.LocalModeBridgeInterface:
		return ipvs.LocalDetector{Interface: d.DetectLocal.BridgeInterface}
	case config.LocalModeInterfaceNamePrefix:
		return ipvs.LocalDetector{InterfacePrefix: d.DetectLocal.InterfaceNamePrefix}
	}
	return ipvs.LocalDetector{}
}

// localDetectorSetter is a dataplane that tells this node's pods from
// other clients (ipvs.Dataplane), fed this node's pod CIDRs with
// detect-local mode NodeCIDR.
type localDetectorSetter interface {
	SetLocalDetector(ipvs.LocalDetector)
}

func openIPVS(cfg *config.Config, log *slog.Logger) (plugin.Dataplane, error) {
	ic := ipvsConfig(cfg)
	ic.Log = log
	dp, err := ipvs.Open(ic)
	if err != nil {
		return nil, fmt.Errorf("dataplane.mode ipvs: %w", err)
	}
	return dp, nil
}

// runDaemon wires the watch, planner, reconcile loop, dataplane and HTTP
// servers together and runs them until ctx is done. Shutting down stops
// the loop and the servers and closes the dataplane, which leaves the
// kernel's state in place: traffic keeps flowing across a restart.
func runDaemon(ctx context.Context, dc daemonConfig) (err error) {
	log := dc.Log
	cfg := dc.Watcher.Config()
	warnDeprecated(log, dc.Watcher)
	dpCfg := cfg.Dataplane
	if dc.NewDSR == nil && dc.NewDataplane == nil && dpCfg.Mode == config.ModeIPVS {
		dc.NewDSR = openDSR
	}
	if dc.NewDataplane == nil {
		dc.NewDataplane = newDataplane
	}
	if dc.ConfigPollInterval <= 0 {
		dc.ConfigPollInterval = configPollInterval
	}

	// The dataplane's own warnings (drained real servers or stale
	// conntrack entries it could not delete) and settings it changed.
	dp, err := dc.NewDataplane(cfg, log.With("component", "dataplane"))
	if err != nil {
		return err
	}
	defer func() {
		// Close releases the dataplane's handles; by the Dataplane
		// contract it never removes kernel state.
		if cerr := dp.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("close dataplane %s: %w", dp.Name(), cerr))
		}
	}()

	// The dsr side (dataplane.forwardingMode, the forwarding-mode
	// annotation): its settings are read at start.
	var dsr *reconcile.DSRConfig
	if dc.NewDSR != nil {
		var closeDSR func() error
		if dsr, closeDSR, err = dc.NewDSR(cfg); err != nil {
			return err
		}
		defer func() {
			if cerr := closeDSR(); cerr != nil {
				err = errors.Join(err, fmt.Errorf("close dsr: %w", cerr))
			}
		}()
	}

	reg := status.NewRegistry()
	m := metrics.New(reg)
	// kube-proxy's healthz: unhealthy when a change waits longer than
	// twice the sync period.
	tracker := status.NewSyncTracker(2*dpCfg.SyncPeriod.Std(), nil)
	hc := healthcheck.NewServer(nil, log.With("component", "healthcheck"),
		healthcheck.WithProxyHealthy(func() bool { return tracker.Health().Healthy }))
	defer hc.Close()

	var r *runner.Runner
	lbm, err := lb.New(ctx, lb.Config{
		Client:     dc.Client,
		NodeName:   dc.NodeName,
		Namespace:  lb.DaemonNamespace(os.Getenv("POD_NAMESPACE"), os.ReadFile),
		Types:      announcerTypes(),
		Registerer: reg,
		Trigger:    func() { r.Trigger() },
		Log:        log,
	}, cfg)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := lbm.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("close announcers: %w", cerr))
		}
	}()

	policies, reporter, closePolicies, err := newPolicies(ctx, dc, cfg, func() { r.Trigger() })
	if err != nil {
		return err
	}
	defer closePolicies()
	src := k8s.New(dc.Client, k8s.Options{
		NodeName:         dc.NodeName,
		ServiceProxyName: cfg.ServiceProxyName,
		// The loop programs what the lists brought so far, add-only,
		// so that a start's kernel work overlaps them (EarlyApply).
		Early: true,
		OnChange: func() {
			tracker.Queued()
			r.Trigger()
		},
		// A bad forwarding-mode annotation: a Warning Event on the
		// Service, through the policies' Event recorder.
		OnServiceWarning: reporter.PolicyEvent,
	}, log.With("component", "k8s"))
	// The schedulers a Service's annotation or a policy may name are the
	// dataplane's (nil when it names none).
	schedulers, _ := dp.(plugin.SchedulerSet)
	planOpts := cfg.PlanOptions()
	planOpts.Schedulers = schedulers
	if dpCfg.DetectLocal.Mode == config.LocalModeClusterCIDR && len(dpCfg.ClusterCIDRs) == 0 {
		log.Warn("dataplane.detectLocal.mode is ClusterCIDR but dataplane.clusterCIDRs is empty: pods cannot be told from other clients, only the node's own traffic to a ClusterIP is masqueraded")
	}
	followPodCIDRs := podCIDRFollower(dp, dpCfg, log.With("component", "dataplane"))
	var loop *reconcile.Loop
	loop = reconcile.New(reconcile.Config{
		NodeName:  dc.NodeName,
		Source:    src,
		Planner:   plan.New(planOpts),
		Dataplane: dp,
		Elected:   lbm.Elected(),
		Alive:     lbm.Alive(),
		OnNodes: func(nodes map[string]*model.Node) {
			// KEP-3836: /healthz fails while this node's Node is being
			// deleted. Once the Node is gone its last state stands, as
			// kube-proxy judges the deleted object.
			if n := nodes[dc.NodeName]; n != nil {
				tracker.SetNodeEligible(!n.Deleting)
				if followPodCIDRs(n.PodCIDRs) {
					loop.RequestFull() // this Sync programs the detector
				}
			}
			lbm.SetNodes(nodes)
		},
		Metrics:    m,
		Health:     hc,
		DSR:        dsr,
		EarlyApply: true,
		Log:        log.With("component", "reconcile"),
		// The periodic repair of kernel drift; statistics ticks and
		// other syncs without changes do not reprogram everything.
		FullSyncPeriod: dpCfg.SyncPeriod.Std(),

		PolicyStage: policystage.Config{
			Policies:      policies,
			Reporter:      reporter,
			Schedulers:    schedulers,
			Metrics:       policystage.NewMetrics(reg),
			Deadline:      cfg.Policies.EvaluationDeadline.Std(),
			Workers:       cfg.Policies.EvaluationWorkers(),
			StatsInterval: cfg.Policies.StatisticsInterval.Std(),
		},
	})
	retry := max(min(maxRetryInterval, dpCfg.SyncPeriod.Std()), dpCfg.MinSyncPeriod.Std())
	released := false
	r = runner.New("sync", func(ctx context.Context) error {
		start := time.Now()
		res, err := loop.Sync(ctx)
		if err == nil && res.Ran {
			tracker.Updated(start)
		}
		if !released && res.Full && res.Applied {
			// The start's garbage (the lists as decoded, the first
			// plan's and diff's intermediates) is several times what
			// stays live: hand its pages back to the kernel now rather
			// than at the scavenger's slow pace. Not on the loop's
			// goroutine: the forced collection takes hundreds of
			// milliseconds on a slow node, and a change arriving
			// meanwhile must not wait for it.
			released = true
			go debug.FreeOSMemory()
		}
		return err
	}, dpCfg.MinSyncPeriod.Std(), dpCfg.SyncPeriod.Std(), retry,
		// As kube-proxy's burstSyncs: a change right after another sync
		// (a statistics tick, a periodic resync) does not wait for
		// minSyncPeriod.
		runner.WithBurst(syncBurst))
	// The first sync is pending from the start: /healthz fails if it never
	// happens.
	tracker.Queued()

	ready := func() error {
		if last, _ := loop.LastSync(); last.IsZero() {
			if !src.HasSynced() {
				if err := src.Healthy(); err != nil {
					// Name what blocks the sync, an RBAC denial above all.
					return fmt.Errorf("waiting for the Kubernetes caches to sync: %w", err)
				}
				return errors.New("waiting for the Kubernetes caches to sync")
			}
			if policies != nil && !policies.HasSynced() {
				return errors.New("waiting for the policy ConfigMaps to load")
			}
			return errors.New("no sync applied yet")
		}
		if err := src.Healthy(); err != nil {
			return fmt.Errorf("watching Kubernetes: %w", err)
		}
		return lbm.Ready()
	}
	reload := newReloader(cfg, loop, policies, lbm.SetPools, r.Trigger, log.With("component", "config"), reg)
	reload.schedulers = schedulers
	reload.setAnnouncers = lbm.SetAnnouncers
	if d, ok := dp.(drainTimeoutSetter); ok {
		reload.setDrainTimeout = d.SetDrainTimeout
	}
	metricsHandler := status.MetricsHandler(reg, func() any { return daemonState{loop.State(), lbm.State()} })
	if dc.Profiling {
		metricsHandler = withProfiling(metricsHandler)
	}
	metricsSrv, err := status.Listen("metrics", cfg.Metrics.BindAddress, metricsHandler)
	if err != nil {
		return err
	}
	healthSrv, err := status.Listen("health", cfg.Health.BindAddress, status.HealthHandler(tracker, ready))
	if err != nil {
		metricsSrv.Shutdown(context.Background())
		return err
	}
	log.Info("serving", "metrics", metricsSrv.Addr().String(), "health", healthSrv.Addr().String(),
		"dataplane", dp.Name(), "node", dc.NodeName)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	serveErr := make(chan error, 2)
	for _, s := range []*status.Server{metricsSrv, healthSrv} {
		go func() {
			if err := s.Serve(); err != nil {
				serveErr <- err
			}
		}()
	}
	var wg sync.WaitGroup
	wg.Go(func() { src.Run(ctx) })
	wg.Go(func() { lbm.Run(ctx) })
	wg.Go(func() { r.Run(ctx) })
	wg.Go(func() { policies.Run(ctx) })
	wg.Go(func() { reporter.Run(ctx) })
	wg.Go(func() { tick(ctx, cfg.Policies.StatisticsInterval.Std(), r.Trigger) })
	wg.Go(func() {
		dc.Watcher.Run(ctx, dc.ConfigPollInterval, func(next *config.Config) {
			warnDeprecated(log, dc.Watcher)
			reload.apply(next)
		}, reload.reject)
	})

	select {
	case <-ctx.Done():
		log.Info("shutting down: the dataplane's state is left in place")
	case err = <-serveErr:
		log.Error("shutting down", "err", err)
	}
	cancel()
	wg.Wait()
	sctx, scancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer scancel()
	return errors.Join(err, metricsSrv.Shutdown(sctx), healthSrv.Shutdown(sctx))
}

// podCIDRFollower returns what OnNodes calls with this node's pod CIDRs:
// with detect-local mode NodeCIDR and a dataplane that detects pods, it
// hands the dataplane a detector when they change and reports true;
// otherwise it does nothing. Unlike kube-proxy, which waits for the Node
// to have pod CIDRs before it starts and exits when they change, the
// detector follows them; until the Node has some, only the node's own
// traffic to a ClusterIP is masqueraded (as without a detector).
func podCIDRFollower(dp plugin.Dataplane, d config.Dataplane, log *slog.Logger) func([]netip.Prefix) bool {
	setter, ok := dp.(localDetectorSetter)
	if !ok || d.DetectLocal.Mode != config.LocalModeNodeCIDR {
		return func([]netip.Prefix) bool { return false }
	}
	var last []netip.Prefix
	warned := false
	return func(cidrs []netip.Prefix) bool {
		if slices.Equal(cidrs, last) {
			if len(cidrs) == 0 && !warned {
				warned = true
				log.Warn("detect-local mode NodeCIDR: this node's Node has no spec.podCIDRs yet: only the node's own traffic to a ClusterIP is masqueraded until it has")
			}
			return false
		}
		last = slices.Clone(cidrs)
		setter.SetLocalDetector(ipvs.LocalDetector{CIDRs: last})
		log.Info("detect-local mode NodeCIDR: pods are this node's pod CIDRs", "podCIDRs", fmt.Sprint(last))
		return true
	}
}

// drainTimeoutSetter is a dataplane whose graceful termination has a
// bound a reload may change (ipvs.Dataplane).
type drainTimeoutSetter interface {
	SetDrainTimeout(time.Duration)
}

// reloader applies config reloads: the planner's options at once, the
// rest at the next restart.
type reloader struct {
	current  *config.Config
	loop     *reconcile.Loop
	policies *registry.Registry
	// schedulers are the dataplane's, kept in the planner's options.
	schedulers plugin.SchedulerSet
	// setPools applies the address pools.
	setPools func([]config.Pool) error
	// setAnnouncers applies the announcers when it can without a
	// restart; its error says why not.
	setAnnouncers func([]config.Announcer) error
	// setDrainTimeout applies dataplane.ipvs.drainTimeout; nil for a
	// dataplane that drains nothing.
	setDrainTimeout func(time.Duration)
	trigger         func()
	log             *slog.Logger
	// successful is 1 when the last changed file was accepted, 0 when it
	// was rejected (as Prometheus' own config_last_reload_successful).
	successful prometheus.Gauge
	successAt  prometheus.Gauge
}

func newReloader(cur *config.Config, loop *reconcile.Loop, policies *registry.Registry, setPools func([]config.Pool) error, trigger func(), log *slog.Logger, reg prometheus.Registerer) *reloader {
	rl := &reloader{
		current: cur, loop: loop, policies: policies, setPools: setPools, trigger: trigger, log: log,
		successful: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Name: "config_last_reload_successful",
			Help: "1 when the last change of the config file was accepted, 0 when it was rejected (the last good config stays in force).",
		}),
		successAt: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Name: "config_last_reload_success_timestamp_seconds",
			Help: "Unix time the config file was last loaded successfully.",
		}),
	}
	reg.MustRegister(rl.successful, rl.successAt)
	rl.successful.Set(1)
	rl.successAt.SetToCurrentTime()
	return rl
}

func (rl *reloader) apply(next *config.Config) {
	rl.successful.Set(1)
	rl.successAt.SetToCurrentTime()
	changed := config.Changed(rl.current, next)
	if len(changed) == 0 {
		return
	}
	var live, restart []string
	for _, f := range changed {
		switch {
		case slices.Contains(liveFields, f):
			live = append(live, f)
		case f == "announcers" && rl.setAnnouncers != nil:
			if err := rl.setAnnouncers(next.Announcers); err != nil {
				rl.log.Warn("announcers not reloaded", "reason", err)
				restart = append(restart, f)
			} else {
				live = append(live, f)
			}
		default:
			restart = append(restart, f)
		}
	}
	if len(live) > 0 {
		if opts := next.PlanOptions(); !reflect.DeepEqual(opts, rl.current.PlanOptions()) {
			opts.Schedulers = rl.schedulers
			rl.loop.SetOptions(opts)
			rl.trigger()
		}
		if d := next.Dataplane.IPVS.DrainTimeout; d != rl.current.Dataplane.IPVS.DrainTimeout && rl.setDrainTimeout != nil {
			rl.setDrainTimeout(d.Std())
		}
		if next.Policies.Default != rl.current.Policies.Default && rl.policies != nil {
			rl.policies.SetDefault(next.Policies.Default) // triggers the loop
		}
		if slices.Contains(live, "pools") && rl.setPools != nil {
			if err := rl.setPools(next.Pools); err != nil {
				rl.log.Error("config: pools not applied", "err", err)
			}
		}
		rl.log.Info("config reloaded", "applied", strings.Join(live, ","))
	}
	if len(restart) > 0 {
		rl.log.Warn("config changed in fields that take effect at the next restart", "fields", strings.Join(restart, ","))
	}
	// Fields that need a restart keep their running values, so later
	// reloads report them again until the daemon restarts.
	rl.current = withLive(rl.current, next)
	if slices.Contains(live, "announcers") {
		rl.current.Announcers = next.Announcers
	}
}

// withLive returns cur with next's live fields.
func withLive(cur, next *config.Config) *config.Config {
	c := *cur
	c.Dataplane.IPVS.Scheduler = next.Dataplane.IPVS.Scheduler
	c.Dataplane.IPVS.DrainTimeout = next.Dataplane.IPVS.DrainTimeout
	c.Dataplane.NodePortAddresses = next.Dataplane.NodePortAddresses
	c.LoadBalancerClass = next.LoadBalancerClass
	c.Dataplane.ForwardingMode = next.Dataplane.ForwardingMode
	c.IgnoreUnclassed = next.IgnoreUnclassed
	c.Policies.Default = next.Policies.Default
	c.Pools = next.Pools
	return &c
}

// warnDeprecated logs the deprecation warning the config file w last
// read deserves, if any: once per read, at start and on each reload.
func warnDeprecated(log *slog.Logger, w *config.Watcher) {
	if d := w.Deprecation(); d != "" {
		log.Warn("config file in a deprecated format", "warning", d)
	}
}

func (rl *reloader) reject(err error) {
	rl.successful.Set(0)
	rl.log.Error("config rejected; keeping the last good config", "err", err)
}

// newPolicies builds the policy registry over a WebAssembly runtime with
// the config's limits, and the reporter that records Events (through
// client-go's EventRecorder) and writes Service conditions. close releases
// the runtime and the Event broadcaster.
func newPolicies(ctx context.Context, dc daemonConfig, cfg *config.Config, trigger func()) (*registry.Registry, *registry.Reporter, func(), error) {
	log := dc.Log.With("component", "policies")
	wcfg := wasm.Config{
		CacheDir:         cfg.Policies.CompilationCacheDir(),
		MemoryLimitPages: uint32(min(cfg.Policies.MemoryLimit/(64<<10), 1<<16)),
		Deadline:         cfg.Policies.EvaluationDeadline.Std(),
		CacheFault: func(err error) {
			log.Warn("the WebAssembly compilation cache failed a compilation; compiled again, without it if it keeps failing", "err", err)
		},
		// An instance per evaluation worker: a worker never waits for one.
		MaxInstances: cfg.Policies.EvaluationWorkers(),
		Log: func(rec wasm.LogRecord) {
			log.Log(context.Background(), rec.Level, rec.Message, "policy", rec.Policy, "dropped", rec.Dropped)
		},
	}
	rt, err := wasm.NewRuntime(ctx, wcfg)
	if errors.Is(err, wasm.ErrCacheDir) {
		log.Warn("policies.cacheDir unusable; WebAssembly policies are compiled at every start, and their last good versions kept in memory only", "err", err)
		wcfg.CacheDir = ""
		rt, err = wasm.NewRuntime(ctx, wcfg)
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("start the WebAssembly runtime: %w", err)
	}
	// The last good version of each policy, kept next to the compiled
	// modules, outlives a restart while its ConfigMap is broken.
	var kept *lastgood.Dir
	if wcfg.CacheDir != "" {
		if kept, err = lastgood.New(filepath.Join(wcfg.CacheDir, "last-good"), registry.DefaultMaxModuleSize); err != nil {
			log.Warn("policies.cacheDir/last-good unusable; the policies' last good versions are kept in memory only", "err", err)
		}
	}
	policies := registry.New(dc.Client, registry.Options{
		Default:  cfg.Policies.Default,
		LastGood: kept,
		Load: func(ctx context.Context, name string, module []byte) (registry.Module, error) {
			p, err := rt.Load(ctx, name, module)
			if err != nil {
				return nil, err
			}
			return p, nil
		},
		OnChange: trigger,
	}, log)
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: dc.Client.CoreV1().Events("")})
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "switchyard", Host: dc.NodeName})
	reporter := registry.NewReporter(dc.Client, recorder, registry.ReporterOptions{NodeName: dc.NodeName}, log)
	return policies, reporter, func() {
		broadcaster.Shutdown()
		_ = rt.Close(context.Background())
	}, nil
}

// tick calls trigger every interval until ctx is done: the statistics
// tick that re-evaluates policies.
func tick(ctx context.Context, interval time.Duration, trigger func()) {
	if interval <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			trigger()
		}
	}
}

// daemonState is /debug/state: the loop's desired and applied state, and
// each announcer's own (the BGP announcer's BFD sessions).
type daemonState struct {
	reconcile.State
	Announcers map[string]any `json:"announcers,omitempty"`
}
