package lbipam

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/switchyard-lb/switchyard/core/ipam"
)

// Defaults of Config. The lease timings are short: a new leader takes
// over about RetryPeriod after the old one stops cleanly (it releases the
// Lease), and within LeaseDuration plus RetryPeriod after it dies.
const (
	DefaultLeaseNamespace = "switchyard-system"
	DefaultLeaseName      = "switchyard-ipam"
	DefaultLeaseDuration  = 6 * time.Second
	DefaultRenewDeadline  = 4 * time.Second
	DefaultRetryPeriod    = 1 * time.Second

	// eventComponent is the source of the Events the controller writes.
	eventComponent = "switchyard-ipam"
)

// Config configures a Controller.
type Config struct {
	Client kubernetes.Interface
	// Identity names this candidate in the Lease: the node name.
	Identity string
	// Pools are the address pools, validated by New.
	Pools []ipam.Pool
	// Class is the loadBalancerClass handled; DefaultClass when empty.
	Class string
	// IgnoreUnclassed leaves LoadBalancer Services without a class alone.
	IgnoreUnclassed bool
	// LeaseNamespace and LeaseName name the Lease; DefaultLeaseNamespace
	// and DefaultLeaseName when empty.
	LeaseNamespace, LeaseName string
	// Lease timings (client-go leader election); the defaults when zero.
	// LeaseDuration > RenewDeadline > 1.2 * RetryPeriod.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Log receives the controller's log; slog.Default() when nil.
	Log *slog.Logger
}

// Controller allocates LoadBalancer addresses while it holds the Lease.
// Its methods are safe for concurrent use.
type Controller struct {
	cfg     Config
	log     *slog.Logger
	leading atomic.Bool

	mu    sync.Mutex
	pools []ipam.Pool
	term  *term // non-nil while leading
}

// New checks cfg, fills its defaults and returns a Controller. It starts
// nothing: Run does.
func New(cfg Config) (*Controller, error) {
	if cfg.Client == nil {
		return nil, errors.New("lbipam: no Kubernetes client")
	}
	if cfg.Identity == "" {
		return nil, errors.New("lbipam: empty identity (want the node name)")
	}
	if _, err := ipam.New(cfg.Pools); err != nil {
		return nil, fmt.Errorf("lbipam: %w", err)
	}
	if cfg.Class == "" {
		cfg.Class = DefaultClass
	}
	if cfg.LeaseNamespace == "" {
		cfg.LeaseNamespace = DefaultLeaseNamespace
	}
	if cfg.LeaseName == "" {
		cfg.LeaseName = DefaultLeaseName
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = DefaultLeaseDuration
	}
	if cfg.RenewDeadline == 0 {
		cfg.RenewDeadline = DefaultRenewDeadline
	}
	if cfg.RetryPeriod == 0 {
		cfg.RetryPeriod = DefaultRetryPeriod
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	c := &Controller{cfg: cfg, log: cfg.Log.With("component", "lbipam", "identity", cfg.Identity), pools: slices.Clone(cfg.Pools)}
	// Let client-go check the timings now rather than in Run.
	if _, err := c.elector(c.lock(), func(context.Context) {}); err != nil {
		return nil, fmt.Errorf("lbipam: leader election: %w", err)
	}
	return c, nil
}

// IsLeader reports whether this Controller holds the Lease and is
// allocating (its caches have synced and it has claimed every published
// address).
func (c *Controller) IsLeader() bool { return c.leading.Load() }

// SetPools replaces the address pools (a configuration reload). Invalid
// pools are refused and nothing changes. While leading, addresses no
// longer in any pool are taken away and every Service is revisited.
func (c *Controller) SetPools(pools []ipam.Pool) error {
	if _, err := ipam.New(pools); err != nil {
		return fmt.Errorf("lbipam: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pools = slices.Clone(pools)
	if c.term != nil {
		c.term.queue.Add(poolsKey)
	}
	return nil
}

// Stats returns every pool's address counts, in configuration order,
// for switchyard_pool_addresses_total and _used; nil when not leading
// (only the leader knows what is used).
func (c *Controller) Stats() []ipam.PoolStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.term == nil || !c.leading.Load() {
		return nil
	}
	return c.term.alloc.Stats()
}

func (c *Controller) currentPools() []ipam.Pool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pools
}

// Run campaigns for the Lease and allocates while holding it, until ctx
// is done. After losing the Lease it campaigns again. When it stops
// leading it stops acting first and then releases the Lease, so that
// another candidate takes over at its next retry: within 2.2
// RetryPeriods (client-go jitters retries by up to 1.2 RetryPeriod)
// rather than after LeaseDuration.
func (c *Controller) Run(ctx context.Context) {
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(c.log.Handler()))
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	defer broadcaster.Shutdown()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.cfg.Client.CoreV1().Events("")})
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: eventComponent, Host: c.cfg.Identity})
	for ctx.Err() == nil {
		c.campaign(ctx, recorder)
	}
}

// campaign runs one leader election: it waits for the Lease, leads until
// it loses it or ctx is done, and returns once it has stopped acting and
// released the Lease.
func (c *Controller) campaign(ctx context.Context, recorder record.EventRecorder) {
	var (
		mu      sync.Mutex
		ended   bool
		started bool
		done    = make(chan struct{})
	)
	lock := c.lock()
	le, err := c.elector(lock, func(lctx context.Context) {
		mu.Lock()
		if ended {
			mu.Unlock()
			return
		}
		started = true
		mu.Unlock()
		defer close(done)
		c.lead(lctx, recorder)
	})
	if err != nil { // New checked the same configuration
		c.log.Error("leader election", "err", err)
		<-ctx.Done()
		return
	}
	le.Run(ctx)
	mu.Lock()
	ended = true
	wasStarted := started
	mu.Unlock()
	if !wasStarted {
		return
	}
	<-done
	c.release(lock)
	if ctx.Err() == nil {
		// Lost the Lease (renewal failed): give the API a breath before
		// campaigning again.
		select {
		case <-ctx.Done():
		case <-time.After(c.cfg.RetryPeriod):
		}
	}
}

// lead allocates until ctx is done, in terms: a term ends early only to
// be replaced (pools needing an informer it does not run).
func (c *Controller) lead(ctx context.Context, recorder record.EventRecorder) {
	c.log.Info("acquired the allocator lease", "lease", c.cfg.LeaseNamespace+"/"+c.cfg.LeaseName)
	for ctx.Err() == nil {
		c.runTerm(ctx, recorder)
	}
	c.log.Info("stopped allocating")
}

func (c *Controller) runTerm(ctx context.Context, recorder record.EventRecorder) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Build the term from the pools and publish it under one lock: a
	// SetPools either came before (and is built in) or finds c.term and
	// queues the reload; none falls in between and is lost.
	c.mu.Lock()
	alloc, err := ipam.New(c.pools)
	var t *term
	if err == nil {
		t = newTerm(c, alloc, recorder, c.pools)
		t.restart = cancel
		c.term = t
	}
	c.mu.Unlock()
	if err != nil { // SetPools validated them
		c.log.Error("address pools", "err", err)
		<-ctx.Done()
		return
	}
	defer func() {
		c.leading.Store(false)
		c.mu.Lock()
		c.term = nil
		c.mu.Unlock()
	}()
	began := time.Now()
	t.run(ctx, func() {
		c.leading.Store(true)
		c.log.Info("allocating", "ready_after", time.Since(began).Round(time.Millisecond))
	})
}

func (c *Controller) lock() *resourcelock.LeaseLock {
	return &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: c.cfg.LeaseNamespace, Name: c.cfg.LeaseName},
		Client:     c.cfg.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: c.cfg.Identity},
	}
}

func (c *Controller) elector(lock resourcelock.Interface, lead func(context.Context)) (*leaderelection.LeaderElector, error) {
	return leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:          lock,
		Name:          c.cfg.LeaseName,
		LeaseDuration: c.cfg.LeaseDuration,
		RenewDeadline: c.cfg.RenewDeadline,
		RetryPeriod:   c.cfg.RetryPeriod,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: lead,
			OnStoppedLeading: func() {},
			OnNewLeader: func(id string) {
				if id != c.cfg.Identity {
					c.log.Info("allocator leader", "leader", id)
				}
			},
		},
	})
}

// release gives up the Lease if this candidate still holds it, as
// client-go's ReleaseOnCancel does, but only once the term has stopped
// acting: client-go would release while the term may still be writing.
func (c *Controller) release(lock *resourcelock.LeaseLock) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.RenewDeadline)
	defer cancel()
	rec, _, err := lock.Get(ctx)
	if err != nil {
		if !apierrors.IsNotFound(err) {
			c.log.Warn("release the allocator lease", "err", err)
		}
		return
	}
	if rec.HolderIdentity != c.cfg.Identity {
		return
	}
	now := metav1.Now()
	err = lock.Update(ctx, resourcelock.LeaderElectionRecord{
		LeaderTransitions:    rec.LeaderTransitions,
		LeaseDurationSeconds: 1,
		RenewTime:            now,
		AcquireTime:          now,
	})
	if err != nil {
		c.log.Warn("release the allocator lease", "err", err)
		return
	}
	c.log.Info("released the allocator lease")
}
