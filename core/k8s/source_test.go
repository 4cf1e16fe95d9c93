package k8s

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/switchyard-lb/switchyard/core/k8s/k8stest"
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/model/modeltest"
	"github.com/switchyard-lb/switchyard/test/harness"
)

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// fakeCluster is a fake clientset whose watches are counted, so a test
// can wait until the informers watch before it changes anything (the fake
// does not replay changes made between a list and its watch).
type fakeCluster struct {
	*fake.Clientset
	mu      sync.Mutex
	watches map[string]int
}

func newFakeCluster(objs ...runtime.Object) *fakeCluster {
	c := &fakeCluster{Clientset: fake.NewClientset(objs...), watches: make(map[string]int)}
	c.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		w, err := c.Tracker().Watch(a.GetResource(), a.GetNamespace())
		if err == nil {
			c.mu.Lock()
			c.watches[a.GetResource().Resource]++
			c.mu.Unlock()
		}
		return true, w, err
	})
	return c
}

func (c *fakeCluster) watching(resources ...string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range resources {
		if c.watches[r] == 0 {
			return false
		}
	}
	return true
}

// startSource runs a Source until the test ends or stop is called; the
// returned channel receives a value for OnChange calls (coalesced).
func startSource(t *testing.T, src func(Options) *Source) (s *Source, changed <-chan struct{}, stop func()) {
	t.Helper()
	ch := make(chan struct{}, 1)
	s = src(Options{NodeName: "n1", OnChange: func() {
		if !s.HasSynced() {
			t.Errorf("OnChange called before every informer synced")
		}
		select {
		case ch <- struct{}{}:
		default:
		}
	}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return s, ch, stop
}

// nextDelta waits for OnChange and takes deltas until one is not empty,
// checks that it says when its oldest change arrived (before the take),
// and returns it with that time zeroed.
func nextDelta(t *testing.T, s *Source, changed <-chan struct{}) model.Delta {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case <-changed:
			if d := s.Take(); !d.Empty() {
				if d.Received.IsZero() || d.Received.After(time.Now()) {
					t.Errorf("Take: Received = %v, want the arrival of its oldest change", d.Received)
				}
				d.Received = time.Time{}
				return d
			}
		case <-timeout:
			t.Fatal("timed out waiting for a change")
		}
	}
}

func TestSourceWithFakeClient(t *testing.T) {
	web := model.ServiceKey{Namespace: "ns", Name: "web"}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	client := newFakeCluster(k8stest.Service("ns", "web", "10.96.0.10"), k8stest.Slice("ns", "web-1", "web", true, "10.0.0.1"), node)
	var s *Source
	s, changed, _ := startSource(t, func(o Options) *Source {
		s = New(client, o, testLogger(t))
		if s.HasSynced() {
			t.Errorf("HasSynced before Run")
		}
		if d := s.Take(); !d.Empty() {
			t.Errorf("Take before sync = %+v, want empty", d)
		}
		return s
	})

	webSvc, _ := convertService(k8stest.Service("ns", "web", "10.96.0.10"))
	want := model.Delta{
		Services: map[model.ServiceKey]model.ServiceState{web: {Service: webSvc,
			Endpoints: eps(modeltest.Ready("10.0.0.1", ""))}},
		Nodes: map[string]*model.Node{"n1": {Name: "n1", Ready: true}},
	}
	if diff := cmp.Diff(want, nextDelta(t, s, changed), deltaOpts...); diff != "" {
		t.Fatalf("first Take (-want +got):\n%s", diff)
	}
	harness.Poll(t, time.Minute, harness.Cond("the informers to watch", func() bool {
		return client.watching("services", "endpointslices", "nodes")
	}))

	ctx := context.Background()
	slices := client.DiscoveryV1().EndpointSlices("ns")
	if _, err := slices.Update(ctx, k8stest.Slice("ns", "web-1", "web", false, "10.0.0.1"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want = model.Delta{Services: map[model.ServiceKey]model.ServiceState{web: {Service: webSvc,
		Endpoints: eps(modeltest.NotReady("10.0.0.1", ""))}}}
	if diff := cmp.Diff(want, nextDelta(t, s, changed), deltaOpts...); diff != "" {
		t.Fatalf("Take after the slice update (-want +got):\n%s", diff)
	}

	// A slice relabelled to another Service moves to it.
	if _, err := slices.Update(ctx, k8stest.Slice("ns", "web-1", "api", true, "10.0.0.1"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	api := model.ServiceKey{Namespace: "ns", Name: "api"}
	want = model.Delta{Services: map[model.ServiceKey]model.ServiceState{
		web: {Service: webSvc},
		api: {Endpoints: eps(modeltest.Ready("10.0.0.1", ""))},
	}}
	if diff := cmp.Diff(want, nextDelta(t, s, changed), deltaOpts...); diff != "" {
		t.Fatalf("Take after relabelling (-want +got):\n%s", diff)
	}

	if err := client.CoreV1().Services("ns").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := client.CoreV1().Nodes().Delete(ctx, "n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want = model.Delta{Services: map[model.ServiceKey]model.ServiceState{web: {}}, Nodes: map[string]*model.Node{"n1": nil}}
	got := nextDelta(t, s, changed)
	if len(got.Nodes) == 0 || len(got.Services) == 0 { // the two deletes may arrive in two deltas
		d := nextDelta(t, s, changed)
		for k, v := range d.Services {
			if got.Services == nil {
				got.Services = map[model.ServiceKey]model.ServiceState{}
			}
			got.Services[k] = v
		}
		for k, v := range d.Nodes {
			if got.Nodes == nil {
				got.Nodes = map[string]*model.Node{}
			}
			got.Nodes[k] = v
		}
	}
	if diff := cmp.Diff(want, got, deltaOpts...); diff != "" {
		t.Fatalf("Take after the deletes (-want +got):\n%s", diff)
	}
	if err := s.Healthy(); err != nil {
		t.Errorf("Healthy() = %v, want nil", err)
	}
}

// TestHandlers drives the informer handlers directly: tombstones of missed
// deletes, relabelled slices, and objects of the wrong type.
func TestHandlers(t *testing.T) {
	s := New(fake.NewClientset(), Options{ServiceProxyName: "ours"}, testLogger(t))
	web := model.ServiceKey{Namespace: "ns", Name: "web"}
	api := model.ServiceKey{Namespace: "ns", Name: "api"}
	webSvc, _ := convertService(k8stest.Service("ns", "web", "10.96.0.10"))
	steps := []struct {
		name string
		do   func()
		want model.Delta
	}{{
		name: "adds",
		do: func() {
			s.onService(0, k8stest.Service("ns", "web", "10.96.0.10"), false)
			s.onSlice(nil, k8stest.Slice("ns", "web-1", "web", true, "10.0.0.1"))
			s.onNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, false)
		},
		want: model.Delta{
			Services: map[model.ServiceKey]model.ServiceState{web: {Service: webSvc, Endpoints: eps(modeltest.Ready("10.0.0.1", ""))}},
			Nodes:    map[string]*model.Node{"n1": {Name: "n1"}},
		},
	}, {
		name: "a relabelled slice moves; a slice without the label is ignored",
		do: func() {
			s.onSlice(k8stest.Slice("ns", "web-1", "web", true, "10.0.0.1"), k8stest.Slice("ns", "web-1", "api", true, "10.0.0.1"))
			unlabelled := k8stest.Slice("ns", "web-2", "", true, "10.0.0.9")
			s.onSlice(nil, unlabelled)
		},
		want: model.Delta{Services: map[model.ServiceKey]model.ServiceState{
			web: {Service: webSvc},
			api: {Endpoints: eps(modeltest.Ready("10.0.0.1", ""))},
		}},
	}, {
		name: "a Service labelled with our name enters the named watch before it leaves the other: kept",
		do: func() {
			ours := named(k8stest.Service("ns", "web", "10.96.0.10"), "ours")
			mustAdd(t, s.services[1], ours)
			s.onService(1, ours, false)
			s.onService(0, k8stest.Service("ns", "web", "10.96.0.10"), true)
		},
	}, {
		name: "a Service unlabelled leaves the named watch before it enters the other: gone, then back",
		do: func() {
			ours := named(k8stest.Service("ns", "web", "10.96.0.10"), "ours")
			mustDelete(t, s.services[1], ours)
			s.onService(1, ours, true)
			s.mu.Lock()
			if d := s.tr.take(); d.Services[web].Service != nil {
				t.Errorf("after the delete from the only watch holding it, the Service is %+v, want gone", d.Services[web])
			}
			s.mu.Unlock()
			mustAdd(t, s.services[0], k8stest.Service("ns", "web", "10.96.0.10"))
			s.onService(0, k8stest.Service("ns", "web", "10.96.0.10"), false)
		},
		want: model.Delta{Services: map[model.ServiceKey]model.ServiceState{web: {Service: webSvc}}},
	}, {
		name: "tombstones of missed deletes",
		do: func() {
			s.onService(0, cache.DeletedFinalStateUnknown{Key: "ns/web", Obj: k8stest.Service("ns", "web", "10.96.0.10")}, true)
			s.onSlice(cache.DeletedFinalStateUnknown{Key: "ns/web-1", Obj: k8stest.Slice("ns", "web-1", "api", true)}, nil)
			s.onNode(cache.DeletedFinalStateUnknown{Key: "n1", Obj: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}}, true)
		},
		want: model.Delta{
			Services: map[model.ServiceKey]model.ServiceState{web: {}, api: {}},
			Nodes:    map[string]*model.Node{"n1": nil},
		},
	}, {
		name: "objects of the wrong type are ignored",
		do: func() {
			s.onService(0, &corev1.Node{}, false)
			s.onSlice(nil, &corev1.Service{})
			s.onNode(cache.DeletedFinalStateUnknown{Key: "x", Obj: nil}, true)
		},
	}}
	for _, st := range steps {
		st.do()
		s.mu.Lock()
		got := s.tr.take() // Take itself waits for the informers to sync
		s.mu.Unlock()
		if diff := cmp.Diff(st.want, got, deltaOpts...); diff != "" {
			t.Fatalf("%s: take (-want +got):\n%s", st.name, diff)
		}
	}
}

func named(svc *corev1.Service, proxy string) *corev1.Service {
	svc.Labels = map[string]string{LabelServiceProxyName: proxy}
	return svc
}

func mustAdd(t *testing.T, s cache.Store, obj any) {
	t.Helper()
	if err := s.Add(obj); err != nil {
		t.Fatal(err)
	}
}

func mustDelete(t *testing.T, s cache.Store, obj any) {
	t.Helper()
	if err := s.Delete(obj); err != nil {
		t.Fatal(err)
	}
}

func TestSourceForbidden(t *testing.T) {
	client := newFakeCluster()
	var deny atomic.Bool
	deny.Store(true)
	forbid := func(a k8stesting.Action) (bool, runtime.Object, error) {
		if !deny.Load() {
			return false, nil, nil
		}
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "discovery.k8s.io", Resource: "endpointslices"}, "",
			errors.New(`User "alice" cannot list resource "endpointslices" in API group "discovery.k8s.io" at the cluster scope`))
	}
	client.PrependReactor("list", "endpointslices", forbid)

	s, _, _ := startSource(t, func(o Options) *Source { return New(client, o, testLogger(t)) })
	harness.Poll(t, time.Minute, harness.Cond("Healthy() to report the denial", func() bool { return s.Healthy() != nil }))
	err := s.Healthy()
	const want = `cannot list endpointslices.discovery.k8s.io: forbidden for user "alice": grant it with the ClusterRole in deploy/`
	if !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Healthy() = %q, want it to start with %q", err, want)
	}
	if !apierrors.IsForbidden(err) {
		t.Errorf("Healthy() = %v does not wrap the Forbidden status", err)
	}
	if s.HasSynced() {
		t.Errorf("HasSynced with a forbidden resource")
	}
	if d := s.Take(); !d.Empty() {
		t.Errorf("Take without EndpointSlices synced = %+v, want empty", d)
	}

	deny.Store(false) // the ClusterRole got granted: the reflector's retry succeeds
	harness.Poll(t, time.Minute, harness.Cond("the caches to sync once allowed", s.HasSynced))
	if err := s.Healthy(); err != nil {
		t.Errorf("Healthy() after the grant = %v, want nil", err)
	}
}

func TestDescribe(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "",
		errors.New(`User "system:serviceaccount:switchyard-system:switchyard" cannot watch resource "nodes" in API group "" at the cluster scope`))
	tests := []struct {
		name string
		verb string
		err  error
		want string
	}{{
		name: "forbidden names the user and the verb the server denied",
		verb: "list or watch", err: forbidden,
		want: `cannot watch nodes: forbidden for user "system:serviceaccount:switchyard-system:switchyard": grant it with the ClusterRole in deploy/: ` + forbidden.Error(),
	}, {
		name: "forbidden without a user",
		verb: "list", err: apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "", errors.New("no")),
		want: `cannot list nodes: forbidden for user (unknown): grant it with the ClusterRole in deploy/: nodes is forbidden: no`,
	}, {
		name: "unauthorized",
		verb: "list", err: apierrors.NewUnauthorized("bad token"),
		want: `cannot list nodes: the API server rejected our credentials: bad token`,
	}, {
		name: "anything else",
		verb: "watch", err: errors.New("connection refused"),
		want: `cannot watch nodes: connection refused`,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, describe("nodes", tt.verb, tt.err).Error()); diff != "" {
				t.Errorf("describe (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHealthRecordsAndClears(t *testing.T) {
	h := newHealth(slog.New(slog.DiscardHandler))
	steps := []struct {
		resource string
		err      error
		want     string // "" = healthy
	}{
		{resourceNodes, io.EOF, ""},
		{resourceNodes, apierrors.NewResourceExpired("too old"), ""},
		{resourceNodes, context.Canceled, ""},
		{resourceNodes, errors.New("refused"), "cannot watch nodes: refused"},
		{resourceServices, errors.New("down"), "cannot watch services: down"},
		{resourceServices, nil, "cannot watch nodes: refused"},
		{resourceNodes, nil, ""},
		// The two Service watches fail and recover apart, and their
		// failures name the resource.
		{resourceServicesNamed, errors.New("denied"), "cannot watch services: denied"},
		{resourceServices, nil, "cannot watch services: denied"},
		{resourceServicesNamed, nil, ""},
	}
	for i, st := range steps {
		h.observe(st.resource, "watch", st.err)
		got := ""
		if err := h.err(); err != nil {
			got = err.Error()
		}
		if got != st.want {
			t.Fatalf("step %d: err() = %q, want %q", i, got, st.want)
		}
	}
}

// TestSourceEarly: with Options.Early, the Source hands out what it has
// listed while another list is still refused (its caches have not
// synced), and calls OnChange for it; the rest arrives once allowed.
func TestSourceEarly(t *testing.T) {
	web := model.ServiceKey{Namespace: "ns", Name: "web"}
	client := newFakeCluster(k8stest.Service("ns", "web", "10.96.0.10"), k8stest.Slice("ns", "web-1", "web", true, "10.0.0.1"))
	var deny atomic.Bool
	deny.Store(true)
	client.PrependReactor("list", "endpointslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		if !deny.Load() {
			return false, nil, nil
		}
		return true, nil, apierrors.NewServiceUnavailable("not yet")
	})
	changed := make(chan struct{}, 1)
	s := New(client, Options{Early: true, OnChange: func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}}, testLogger(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	d := nextDelta(t, s, changed)
	if s.HasSynced() {
		t.Fatalf("HasSynced while the EndpointSlices' list is refused")
	}
	st, ok := d.Services[web]
	if !ok || st.Service == nil {
		t.Fatalf("early Take = %+v, want the Service listed", d)
	}
	if len(st.Endpoints) != 0 {
		t.Errorf("early Take's endpoints = %v, want none listed yet", st.Endpoints)
	}

	deny.Store(false)
	harness.Poll(t, time.Minute, harness.Cond("the caches to sync", s.HasSynced))
	d = nextDelta(t, s, changed)
	want := []netip.Addr{netip.MustParseAddr("10.0.0.1")}
	var got []netip.Addr
	for _, ep := range d.Services[web].Endpoints {
		got = append(got, ep.Addr)
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
		t.Errorf("endpoints once synced (-want +got):\n%s", diff)
	}
}

// TestServiceWarning: a Service whose forwarding-mode annotation is bad
// is handed to OnServiceWarning with ReasonForwardingModeInvalid once
// per change: not again for an update that changes nothing the Source
// keeps, again when the Service changes, never for a good value.
func TestServiceWarning(t *testing.T) {
	type warning struct{ svc, reason, message string }
	var got []warning
	s := New(fake.NewClientset(), Options{OnServiceWarning: func(k model.ServiceKey, reason, message string) {
		got = append(got, warning{k.String(), reason, message})
	}}, testLogger(t))
	svc := func(mode, ip string) *corev1.Service {
		out := k8stest.Service("ns", "web", ip)
		out.Annotations = map[string]string{AnnotationForwardingMode: mode}
		return out
	}
	s.onService(0, svc("DSR", "10.96.0.10"), false)
	s.onService(0, svc("DSR", "10.96.0.10"), false) // a resync: no change
	s.onService(0, svc("dsr", "10.96.0.10"), false)
	s.onService(0, svc("bogus", "10.96.0.11"), false)
	want := []warning{
		{"ns/web", ReasonForwardingModeInvalid, `annotation switchyard.dev/forwarding-mode "DSR" skipped: unknown forwarding mode "DSR" (want nat or dsr); the Service uses the cluster's default (dataplane.forwardingMode)`},
		{"ns/web", ReasonForwardingModeInvalid, `annotation switchyard.dev/forwarding-mode "bogus" skipped: unknown forwarding mode "bogus" (want nat or dsr); the Service uses the cluster's default (dataplane.forwardingMode)`},
	}
	if d := cmp.Diff(want, got, cmp.AllowUnexported(warning{})); d != "" {
		t.Errorf("warnings (-want +got):\n%s", d)
	}
}
