package lbipam

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/switchyard-lb/switchyard/core/ipam"
	"github.com/switchyard-lb/switchyard/core/model"
)

// poolsKey is the queue item asking the worker to reload the pools; no
// Service has an empty name.
var poolsKey = model.ServiceKey{}

// indexPublished indexes Services by the addresses they publish.
const indexPublished = "publishedIP"

// errDeferred requeues a Service whose new address another Service still
// publishes.
var errDeferred = errors.New("address still published by another Service")

// term is one leadership term: informers, queue and allocator exist only
// while the Controller leads, and are dropped when it stops.
type term struct {
	client          kubernetes.Interface
	class           string
	ignoreUnclassed bool
	pools           func() []ipam.Pool
	log             *slog.Logger
	recorder        record.EventRecorder

	alloc      *ipam.Allocator
	queue      workqueue.TypedRateLimitingInterface[model.ServiceKey]
	factory    informers.SharedInformerFactory
	services   corelisters.ServiceLister
	namespaces corelisters.NamespaceLister // nil unless a pool selects namespaces by label
	published  cache.Indexer

	// restart ends the term early; the Controller starts a new one
	// while it still leads.
	restart context.CancelFunc

	// failed holds the last failure message of each failing Service
	// (worker only): an Event is written when it changes, and failing
	// Services are retried when addresses are freed.
	failed map[model.ServiceKey]string
}

// newTerm builds a term over alloc, made from pools; c.mu is held.
func newTerm(c *Controller, alloc *ipam.Allocator, recorder record.EventRecorder, pools []ipam.Pool) *term {
	t := &term{
		client:          c.cfg.Client,
		class:           c.cfg.Class,
		ignoreUnclassed: c.cfg.IgnoreUnclassed,
		pools:           c.currentPools,
		log:             c.log,
		recorder:        recorder,
		alloc:           alloc,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[model.ServiceKey](),
			workqueue.TypedRateLimitingQueueConfig[model.ServiceKey]{Name: "lbipam"}),
		factory: informers.NewSharedInformerFactory(c.cfg.Client, 0),
		failed:  map[model.ServiceKey]string{},
	}
	svcs := t.factory.Core().V1().Services()
	t.services = svcs.Lister()
	inf := svcs.Informer()
	// Cannot fail before the informer starts.
	_ = inf.AddIndexers(cache.Indexers{indexPublished: func(obj any) ([]string, error) {
		svc, ok := obj.(*corev1.Service)
		if !ok {
			return nil, nil
		}
		var out []string
		for _, ip := range Published(svc) {
			out = append(out, ip.String())
		}
		return out, nil
	}})
	t.published = inf.GetIndexer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    t.enqueue,
		UpdateFunc: func(_, obj any) { t.enqueue(obj) },
		DeleteFunc: t.enqueue,
	})
	if needsNamespaces(pools) {
		// Only pools selecting namespaces by label need them, and only
		// then does the controller need to list and watch Namespaces.
		nss := t.factory.Core().V1().Namespaces()
		t.namespaces = nss.Lister()
		_, _ = nss.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			UpdateFunc: func(old, cur any) {
				o, ok1 := old.(*corev1.Namespace)
				n, ok2 := cur.(*corev1.Namespace)
				if ok1 && ok2 && !maps.Equal(o.Labels, n.Labels) {
					t.enqueueNamespace(n.Name)
				}
			},
		})
	}
	return t
}

// enqueue is the Service handler: it only records the key.
func (t *term) enqueue(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil || name == "" {
		return
	}
	t.queue.Add(model.ServiceKey{Namespace: ns, Name: name})
}

func (t *term) enqueueNamespace(ns string) {
	svcs, _ := t.services.Services(ns).List(labels.Everything())
	for _, s := range svcs {
		t.queue.Add(keyOf(s))
	}
}

func (t *term) enqueueAll() {
	svcs, _ := t.services.List(labels.Everything())
	for _, s := range svcs {
		t.queue.Add(keyOf(s))
	}
}

// run leads until ctx is done; ready is called once the term acts.
func (t *term) run(ctx context.Context, ready func()) {
	defer t.factory.Shutdown()
	defer t.queue.ShutDown()
	t.factory.Start(ctx.Done())
	for typ, ok := range t.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			if ctx.Err() == nil {
				t.log.Error("informer did not sync", "type", typ.String())
			}
			return
		}
	}
	t.claim()
	ready()
	go func() {
		<-ctx.Done()
		t.queue.ShutDown()
	}()
	for t.next(ctx) {
	}
}

// claim hands the allocator every handled Service at once (ipam Sync):
// the addresses they publish are claimed before anything is allocated,
// so a new leader renumbers nothing. The queue, filled by the informers'
// initial adds, then writes what differs.
func (t *term) claim() {
	svcs, _ := t.services.List(labels.Everything())
	var reqs []ipam.Request
	for _, svc := range svcs {
		if !Handles(svc, t.class, t.ignoreUnclassed) {
			continue
		}
		if r, err := RequestFor(svc, t.namespaceLabels(svc.Namespace)); err == nil {
			reqs = append(reqs, r)
		}
	}
	var failed int
	for _, r := range t.alloc.Sync(reqs) {
		if r.Err != nil {
			failed++
		}
	}
	t.log.Info("claimed published addresses", "services", len(reqs), "failed", failed)
}

func (t *term) next(ctx context.Context) bool {
	key, quit := t.queue.Get()
	if quit {
		return false
	}
	defer t.queue.Done(key)
	err := t.process(ctx, key)
	switch {
	case err == nil:
		t.queue.Forget(key)
	case ctx.Err() != nil:
	default:
		if !errors.Is(err, errDeferred) && !apierrors.IsConflict(err) {
			t.log.Warn("process Service", "service", key.String(), "err", err)
		}
		t.queue.AddRateLimited(key)
	}
	return true
}

// process brings one Service in line with the allocator.
func (t *term) process(ctx context.Context, key model.ServiceKey) error {
	if key == poolsKey {
		pools := t.pools()
		if t.namespaces == nil && needsNamespaces(pools) {
			t.log.Info("address pools now select namespaces by label: restarting the allocator with a Namespace informer")
			t.restart()
			return nil
		}
		lost, err := t.alloc.SetPools(pools)
		if err != nil {
			return fmt.Errorf("reload address pools: %w", err)
		}
		t.log.Info("address pools reloaded", "services_losing_addresses", len(lost))
		t.enqueueAll()
		return nil
	}
	svc, err := t.services.Services(key.Namespace).Get(key.Name)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("get Service %s from the cache: %w", key, err)
	}
	if svc == nil || !Handles(svc, t.class, t.ignoreUnclassed) {
		return t.release(ctx, key, svc)
	}

	before := t.alloc.Assigned(key)
	var ips []netip.Addr
	req, allocErr := RequestFor(svc, t.namespaceLabels(key.Namespace))
	if allocErr != nil {
		t.alloc.Release(key)
		allocErr = fmt.Errorf("allocate addresses for %s: %w", key, allocErr)
	} else {
		ips, allocErr = t.alloc.Allocate(req)
	}
	if slices.ContainsFunc(before, func(ip netip.Addr) bool { return !slices.Contains(ips, ip) }) {
		t.retryFailed(key)
	}
	if holder, ok := t.stalePublisher(key, svc, ips); ok {
		// The allocator freed the address, but the holder's status
		// still shows it: publish once it is gone, never both at once.
		t.log.Info("waiting for another Service to stop publishing the address", "service", key.String(), "holder", holder.String())
		t.queue.Add(holder)
		return fmt.Errorf("%s: %s: %w", key, holder, errDeferred)
	}
	if allocErr != nil {
		if t.failed[key] != allocErr.Error() {
			t.recorder.Event(svc, corev1.EventTypeWarning, ReasonAllocationFailed, allocErr.Error())
			t.log.Warn("allocation failed", "service", key.String(), "err", allocErr)
		}
		t.failed[key] = allocErr.Error()
	} else {
		delete(t.failed, key)
	}
	st := DesiredStatus(svc, ips, allocErr, metav1.Now())
	if !StatusDiffers(svc, st) {
		return nil
	}
	if err := t.writeStatus(ctx, svc, st); err != nil {
		return err
	}
	switch {
	case slices.Equal(Published(svc), ips):
	case len(ips) == 0:
		t.log.Info("addresses withdrawn", "service", key.String())
	default:
		t.log.Info("addresses published", "service", key.String(), "ips", joinAddrs(ips))
	}
	return nil
}

// release frees what key held, and clears its status when it is no
// longer a LoadBalancer Service. A LoadBalancer Service of another class
// is never written to.
func (t *term) release(ctx context.Context, key model.ServiceKey, svc *corev1.Service) error {
	held := t.alloc.Release(key)
	if held {
		t.retryFailed(key)
	}
	delete(t.failed, key)
	if svc == nil || svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		if held {
			t.log.Info("addresses released", "service", key.String())
		}
		return nil
	}
	ours := held || slices.ContainsFunc(svc.Status.Conditions, func(c metav1.Condition) bool {
		return c.Type == ConditionAddressAllocated
	})
	st := ReleasedStatus(svc)
	if !ours || !StatusDiffers(svc, st) {
		return nil
	}
	if err := t.writeStatus(ctx, svc, st); err != nil {
		return err
	}
	t.log.Info("addresses released", "service", key.String())
	return nil
}

// stalePublisher returns a Service, other than key, that publishes one of
// ips which the allocator does not record for it: its status is about to
// lose it. Services of another class are not considered.
func (t *term) stalePublisher(key model.ServiceKey, svc *corev1.Service, ips []netip.Addr) (model.ServiceKey, bool) {
	published := Published(svc)
	for _, ip := range ips {
		if slices.Contains(published, ip) {
			continue
		}
		objs, _ := t.published.ByIndex(indexPublished, ip.String())
		for _, obj := range objs {
			other, ok := obj.(*corev1.Service)
			if !ok {
				continue
			}
			k := keyOf(other)
			if k == key || (other.Spec.Type == corev1.ServiceTypeLoadBalancer && !Handles(other, t.class, t.ignoreUnclassed)) {
				continue
			}
			if !slices.Contains(t.alloc.Assigned(k), ip) {
				return k, true
			}
		}
	}
	return model.ServiceKey{}, false
}

func (t *term) writeStatus(ctx context.Context, svc *corev1.Service, st corev1.ServiceStatus) error {
	upd := svc.DeepCopy()
	upd.Status = st
	if _, err := t.client.CoreV1().Services(svc.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update status of Service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	return nil
}

// retryFailed requeues the failing Services but except: addresses were
// freed, one of them may now succeed.
func (t *term) retryFailed(except model.ServiceKey) {
	for k := range t.failed {
		if k != except {
			t.queue.Add(k)
		}
	}
}

// needsNamespaces reports whether a pool selects namespaces by label.
func needsNamespaces(pools []ipam.Pool) bool {
	return slices.ContainsFunc(pools, func(p ipam.Pool) bool { return len(p.NamespaceSelectors) > 0 })
}

func (t *term) namespaceLabels(ns string) map[string]string {
	if t.namespaces == nil {
		return nil
	}
	n, err := t.namespaces.Get(ns)
	if err != nil {
		return nil
	}
	return n.Labels
}

func keyOf(svc *corev1.Service) model.ServiceKey {
	return model.ServiceKey{Namespace: svc.Namespace, Name: svc.Name}
}
