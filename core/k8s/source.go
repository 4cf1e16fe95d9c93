package k8s

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/switchyard-lb/switchyard/core/model"
)

// Options configure a Source.
type Options struct {
	// NodeName is this node's name: the Source watches every Node, and
	// warns once synced when this one is missing.
	NodeName string
	// OnChange is called, once every informer has synced, after each
	// change of the watched state (and once when the caches sync). It
	// must not block; a coalescing trigger is the intended callee.
	OnChange func()
	// ServiceProxyName is this proxy's value of the Service label
	// service.kubernetes.io/service-proxy-name: Services carrying the
	// label are watched only when it names this proxy. Empty: only
	// Services without the label, as kube-proxy. It must be a valid label
	// value (New panics otherwise); the config validates it.
	ServiceProxyName string
	// Early makes Take hand out changes, and OnChange be called for
	// them, before every informer has synced too: the state listed so
	// far, for a loop that applies it add-only
	// (plugin.AddOnlyDataplane) while the lists still arrive. HasSynced
	// tells it when the state is whole.
	Early bool
	// OnServiceWarning, when set, is called for each problem of a
	// Service that carries a WarningError (a bad forwarding-mode
	// annotation), when a change of the Service is taken: the daemon
	// records it as a Warning Event on the Service. Like every skipped
	// field, it is logged too. It must not block.
	OnServiceWarning func(svc model.ServiceKey, reason, message string)
}

// Source watches Services, EndpointSlices and Nodes and hands out what
// changed. It is safe for concurrent use.
type Source struct {
	opts      Options
	log       *slog.Logger
	client    kubernetes.Interface
	informers []cache.SharedIndexInformer
	synced    []cache.InformerSynced
	health    *health
	// services holds the store of each Service watch: a Service whose
	// label changes leaves one watch and enters the other.
	services []cache.Store

	mu sync.Mutex
	tr *tracker
	// received is when the oldest change not taken yet arrived; zero
	// when none is pending.
	received time.Time
}

// New returns a Source reading through client. It starts nothing: Run
// does.
func New(client kubernetes.Interface, opts Options, log *slog.Logger) *Source {
	s := &Source{
		opts:   opts,
		log:    log,
		client: client,
		health: newHealth(log),
		tr:     newTracker(time.Now()),
	}
	for i, sel := range serviceListOptions(opts.ServiceProxyName) {
		key := resourceServices
		if i > 0 {
			key = resourceServicesNamed
		}
		inf := s.watch(&corev1.Service{}, key, sel,
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return client.CoreV1().Services(metav1.NamespaceAll).List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return client.CoreV1().Services(metav1.NamespaceAll).Watch(ctx, o)
			},
			cache.ResourceEventHandlerFuncs{
				AddFunc:    func(obj any) { s.onService(i, obj, false) },
				UpdateFunc: func(_, obj any) { s.onService(i, obj, false) },
				DeleteFunc: func(obj any) { s.onService(i, obj, true) },
			})
		s.services = append(s.services, inf.GetStore())
	}
	s.watch(&discoveryv1.EndpointSlice{}, resourceEndpointSlices, sliceListOptions(),
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return client.DiscoveryV1().EndpointSlices(metav1.NamespaceAll).List(ctx, o)
		},
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return client.DiscoveryV1().EndpointSlices(metav1.NamespaceAll).Watch(ctx, o)
		},
		cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { s.onSlice(nil, obj) },
			UpdateFunc: func(old, obj any) { s.onSlice(old, obj) },
			DeleteFunc: func(obj any) { s.onSlice(obj, nil) },
		})
	s.watch(&corev1.Node{}, resourceNodes, metav1.ListOptions{},
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return client.CoreV1().Nodes().List(ctx, o)
		},
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return client.CoreV1().Nodes().Watch(ctx, o)
		},
		cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { s.onNode(obj, false) },
			UpdateFunc: func(_, obj any) { s.onNode(obj, false) },
			DeleteFunc: func(obj any) { s.onNode(obj, true) },
		})
	return s
}

// watch builds an informer for obj whose list and watch calls carry the
// selectors of sel and report to health under key (the resource, or
// resourceServicesNamed), with the handlers, and returns it.
func (s *Source) watch(obj runtime.Object, key string, sel metav1.ListOptions,
	list cache.ListWithContextFunc, watchFn cache.WatchFuncWithContext, h cache.ResourceEventHandler,
) cache.SharedIndexInformer {
	restrict := func(o metav1.ListOptions) metav1.ListOptions {
		o.LabelSelector, o.FieldSelector = sel.LabelSelector, sel.FieldSelector
		return o
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			out, err := list(ctx, restrict(o))
			s.health.observe(key, "list", err)
			return out, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			out, err := watchFn(ctx, restrict(o))
			s.health.observe(key, "watch", err)
			return out, err
		},
	}
	// The client tells the reflector whether it supports streaming lists
	// (fake clientsets do not).
	inf := cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, s.client), obj,
		cache.SharedIndexInformerOptions{})
	s.informers = append(s.informers, inf)
	// These calls fail only once the informer has started; it has not.
	if err := inf.SetTransform(dropUnread); err != nil {
		s.log.Error("cannot set the cache's transform", "resource", key, "err", err)
	}
	if err := inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		s.health.watchFailed(key, err)
	}); err != nil {
		s.log.Error("cannot set the watch error handler", "resource", key, "err", err)
	}
	reg, err := inf.AddEventHandler(h)
	if err != nil {
		s.log.Error("cannot add the event handler", "resource", key, "err", err)
		s.synced = append(s.synced, func() bool { return false })
		return inf
	}
	s.synced = append(s.synced, reg.HasSynced)
	return inf
}

// Run starts the informers and returns when ctx is done. Call it once.
func (s *Source) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, inf := range s.informers {
		wg.Go(func() { inf.RunWithContext(ctx) })
	}
	if cache.WaitForCacheSync(ctx.Done(), s.synced...) {
		s.mu.Lock()
		local := s.tr.node(s.opts.NodeName)
		s.mu.Unlock()
		s.log.Info("Kubernetes caches synced")
		if s.opts.NodeName != "" && local == nil {
			s.log.Warn("this node's Node object does not exist (yet)", "node", s.opts.NodeName)
		}
		s.notify()
	}
	<-ctx.Done()
	wg.Wait()
}

// HasSynced reports whether every informer has listed and delivered its
// initial state.
func (s *Source) HasSynced() bool {
	for _, synced := range s.synced {
		if !synced() {
			return false
		}
	}
	return true
}

// Take returns the current state of every Service and Node that differs
// from what the previous Take returned (the first returns everything).
// Before every informer has synced it returns an empty delta, unless
// Options.Early.
func (s *Source) Take() model.Delta {
	if !s.opts.Early && !s.HasSynced() {
		return model.Delta{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.tr.take()
	if !d.Empty() {
		d.Received = s.received
	}
	s.received = time.Time{}
	return d
}

// changedLocked records that a change arrived now, if it is the oldest
// pending; s.mu is held.
func (s *Source) changedLocked() {
	if s.received.IsZero() {
		s.received = time.Now()
	}
}

// Healthy returns nil, or the last list or watch failure of a resource
// that has not been listed or watched successfully since.
func (s *Source) Healthy() error { return s.health.err() }

func (s *Source) notify() {
	if s.opts.OnChange != nil && (s.opts.Early || s.HasSynced()) {
		s.opts.OnChange()
	}
}

// unwrap returns the object of an event, looking through the tombstone of
// a delete the informer missed.
func unwrap[T any](obj any) (T, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	t, ok := obj.(T)
	return t, ok
}

func (s *Source) problems(kind, namespace, name string, problems []error) {
	if len(problems) > 0 {
		s.log.Warn("skipped malformed fields", "kind", kind, "namespace", namespace, "name", name,
			"problems", errors.Join(problems...))
	}
}

// onService handles an event of Service watch from. A Service deleted
// from one watch may be in another: its label changed from absent to
// this proxy's name or back, and the API server reports that as a delete
// from the watch it left and an add to the one it entered, in either
// order. The Service is gone only when no watch holds it.
func (s *Source) onService(from int, obj any, deleted bool) {
	svc, ok := unwrap[*corev1.Service](obj)
	if !ok {
		return
	}
	if deleted {
		if other := s.heldElsewhere(from, svc); other != nil {
			svc, deleted = other, false
		}
	}
	var (
		m        *model.Service
		problems []error
	)
	if !deleted {
		m, problems = convertService(svc)
		s.problems("Service", svc.Namespace, svc.Name, problems)
	}
	key := serviceKeyOf(svc.Namespace, svc.Name)
	s.mu.Lock()
	changed := s.tr.setService(key, m)
	if changed {
		s.changedLocked()
	}
	s.mu.Unlock()
	if changed {
		s.warn(key, problems)
		s.notify()
	}
}

// warn hands a changed Service's problems that carry a WarningError to
// Options.OnServiceWarning: once per change, not at every resync.
func (s *Source) warn(key model.ServiceKey, problems []error) {
	if s.opts.OnServiceWarning == nil {
		return
	}
	for _, p := range problems {
		if w, ok := errors.AsType[*WarningError](p); ok {
			s.opts.OnServiceWarning(key, w.Reason, p.Error())
		}
	}
}

// heldElsewhere returns svc as a Service watch other than from holds it,
// or nil.
func (s *Source) heldElsewhere(from int, svc *corev1.Service) *corev1.Service {
	key := svc.Name
	if svc.Namespace != "" {
		key = svc.Namespace + "/" + svc.Name
	}
	for i, store := range s.services {
		if i == from {
			continue
		}
		if obj, ok, err := store.GetByKey(key); err == nil && ok {
			if other, ok := obj.(*corev1.Service); ok {
				return other
			}
		}
	}
	return nil
}

// onSlice handles an EndpointSlice event: old is nil for an add, cur nil
// for a delete. A slice whose service-name label changed moves between
// Services.
func (s *Source) onSlice(old, cur any) {
	var (
		curKey model.ServiceKey
		curOK  bool
		slice  *discoveryv1.EndpointSlice
		eps    []model.Endpoint
	)
	if cur != nil {
		if slice, curOK = unwrap[*discoveryv1.EndpointSlice](cur); curOK {
			curKey, curOK = sliceService(slice)
		}
	}
	if curOK {
		var problems []error
		eps, problems = convertSlice(slice)
		s.problems("EndpointSlice", slice.Namespace, slice.Name, problems)
	}
	changed := false
	s.mu.Lock()
	if old != nil {
		if o, ok := unwrap[*discoveryv1.EndpointSlice](old); ok {
			if key, ok := sliceService(o); ok && (!curOK || key != curKey) {
				changed = s.tr.deleteSlice(key, o.Name)
			}
		}
	}
	if curOK {
		changed = s.tr.setSlice(curKey, slice.Name, eps, triggerTime(slice)) || changed
	}
	if changed {
		s.changedLocked()
	}
	s.mu.Unlock()
	if changed {
		s.notify()
	}
}

func (s *Source) onNode(obj any, deleted bool) {
	node, ok := unwrap[*corev1.Node](obj)
	if !ok {
		return
	}
	var m *model.Node
	if !deleted {
		var problems []error
		m, problems = convertNode(node)
		s.problems("Node", "", node.Name, problems)
	}
	s.mu.Lock()
	changed := s.tr.setNode(node.Name, m)
	if changed {
		s.changedLocked()
	}
	s.mu.Unlock()
	if changed {
		s.notify()
	}
}

// annotationLastApplied is kubectl's copy of the last applied object,
// often the object's largest field.
const annotationLastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// dropUnread is the informers' transform: it drops, before an object is
// cached, what the Source never reads and that can weigh more than the
// rest of the object: managed fields, owner references, kubectl's last
// applied configuration, an EndpointSlice endpoint's target reference
// (five strings naming its Pod, for each of a cluster's endpoints),
// hostname and deprecated topology, and a Node's container images and
// volumes. It changes the object in place (client-go hands the transform
// the decoded object first) and is idempotent.
func dropUnread(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
		m.SetOwnerReferences(nil)
		delete(m.GetAnnotations(), annotationLastApplied)
	}
	if s, ok := obj.(*discoveryv1.EndpointSlice); ok {
		for i := range s.Endpoints {
			ep := &s.Endpoints[i]
			ep.TargetRef, ep.Hostname, ep.DeprecatedTopology = nil, nil, nil
		}
	}
	if n, ok := obj.(*corev1.Node); ok {
		n.Status.Images = nil
		n.Status.VolumesInUse = nil
		n.Status.VolumesAttached = nil
	}
	return obj, nil
}
