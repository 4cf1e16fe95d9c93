//go:build integration

package k8s

import (
	"fmt"
	"net/netip"
	"regexp"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/model/modeltest"
	"github.com/switchyard-lb/switchyard/test/apitest"
	"github.com/switchyard-lb/switchyard/test/harness"
)

const waitTimeout = 90 * time.Second

// reported accumulates what a Source handed out over its Takes: the state
// a consumer applying every delta would hold.
type reported struct {
	Services map[model.ServiceKey]model.ServiceState
	Nodes    map[string]*model.Node
	Triggers []time.Time
}

func (r *reported) apply(d model.Delta) {
	if r.Services == nil {
		r.Services = make(map[model.ServiceKey]model.ServiceState)
		r.Nodes = make(map[string]*model.Node)
	}
	for k, st := range d.Services {
		if st.Service == nil && len(st.Endpoints) == 0 {
			delete(r.Services, k)
		} else {
			r.Services[k] = st
		}
	}
	for k, n := range d.Nodes {
		if n == nil {
			delete(r.Nodes, k)
		} else {
			r.Nodes[k] = n
		}
	}
	r.Triggers = append(r.Triggers, d.TriggerTimes...)
}

// inNamespace returns the reported Services of one namespace.
func (r *reported) inNamespace(ns string) map[model.ServiceKey]model.ServiceState {
	out := make(map[model.ServiceKey]model.ServiceState)
	for k, st := range r.Services {
		if k.Namespace == ns {
			out[k] = st
		}
	}
	return out
}

// watcher is a running Source and what it reported so far.
type watcher struct {
	t       *testing.T
	src     *Source
	changed <-chan struct{}
	stop    func()
	got     reported
}

func startWatcher(t *testing.T, client kubernetes.Interface) *watcher {
	t.Helper()
	s, changed, stop := startSource(t, func(o Options) *Source {
		o.ServiceProxyName = "switchyard" // the daemon's default
		return New(client, o, testLogger(t))
	})
	return &watcher{t: t, src: s, changed: changed, stop: stop}
}

// until takes deltas as OnChange announces them until diff, computed on
// what was reported, is empty.
func (w *watcher) until(what string, diff func(*reported) string) {
	w.t.Helper()
	deadline := time.After(waitTimeout)
	for {
		d := diff(&w.got)
		if d == "" {
			return
		}
		select {
		case <-w.changed:
			w.got.apply(w.src.Take())
		case <-deadline:
			w.t.Fatalf("%s: still differs after %s (-want +got):\n%s", what, waitTimeout, d)
		}
	}
}

// services waits until the reported Services of ns equal want.
func (w *watcher) services(what, ns string, want map[model.ServiceKey]model.ServiceState) {
	w.t.Helper()
	w.until(what, func(r *reported) string { return cmp.Diff(want, r.inNamespace(ns), deltaOpts...) })
}

// must returns v, or panics on err: an API call a test needs failed (Go
// cannot pass a call's two results after a *testing.T argument).
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func ips(t *testing.T, in []string) []netip.Addr {
	t.Helper()
	var out []netip.Addr
	for _, s := range in {
		out = append(out, netip.MustParseAddr(s))
	}
	return sortedAddrs(out)
}

type testSlice struct {
	name, service string
	family        discoveryv1.AddressType
	endpoints     []discoveryv1.Endpoint
	trigger       time.Time
}

func (s testSlice) object(ns string) *discoveryv1.EndpointSlice {
	family := s.family
	if family == "" {
		family = discoveryv1.AddressTypeIPv4
	}
	o := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: s.name,
			Labels: map[string]string{discoveryv1.LabelServiceName: s.service}},
		AddressType: family,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr[int32](8080), Protocol: ptr(corev1.ProtocolTCP)}},
		Endpoints:   s.endpoints,
	}
	if !s.trigger.IsZero() {
		o.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: s.trigger.UTC().Format(time.RFC3339)}
	}
	return o
}

func readyEP(ip, node string) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{ip}, NodeName: ptr(node),
		Conditions: discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)}}
}

func terminatingEP(ip, node string) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{ip}, NodeName: ptr(node),
		Conditions: discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(true), Terminating: ptr(true)}}
}

func modelEP(ip, node string, opts ...func(*model.Endpoint)) model.Endpoint {
	e := modeltest.Ready(ip, node)
	for _, o := range opts {
		o(&e)
	}
	return e
}

func createSlice(t *testing.T, c kubernetes.Interface, ns string, s testSlice) {
	t.Helper()
	must(c.DiscoveryV1().EndpointSlices(ns).Create(t.Context(), s.object(ns), metav1.CreateOptions{}))
}

func updateSlice(t *testing.T, c kubernetes.Interface, ns string, s testSlice) {
	t.Helper()
	must(c.DiscoveryV1().EndpointSlices(ns).Update(t.Context(), s.object(ns), metav1.UpdateOptions{}))
}

func webService(ns, name string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ServiceSpec{
		Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}}
}

// modelWeb is what webService becomes once the API server allocated it.
func modelWeb(t *testing.T, svc *corev1.Service) *model.Service {
	return &model.Service{Key: serviceKeyOf(svc.Namespace, svc.Name), Type: model.ClusterIP,
		ClusterIPs: ips(t, svc.Spec.ClusterIPs),
		Ports:      []model.ServicePort{{Name: "http", Protocol: model.TCP, Port: 80}}}
}

func TestIntegrationServiceTypes(t *testing.T) {
	srv := apitest.Start(t)
	c, ctx, ns := srv.Client, t.Context(), srv.Namespace(t)
	w := startWatcher(t, c)
	harness.Poll(t, waitTimeout, harness.Cond("the first sync", w.src.HasSynced))

	dual := corev1.IPFamilyPolicyRequireDualStack
	local := corev1.ServiceInternalTrafficPolicyLocal
	svcs := []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Name: "cip"}, Spec: corev1.ServiceSpec{
			Ports: []corev1.ServicePort{
				{Name: "http", Port: 80},
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
			},
			InternalTrafficPolicy: &local,
			SessionAffinity:       corev1.ServiceAffinityClientIP,
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "headless"}, Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "np"}, Spec: corev1.ServiceSpec{
			Type:           corev1.ServiceTypeNodePort,
			IPFamilyPolicy: &dual,
			Ports: []corev1.ServicePort{
				{Name: "http", Port: 80},
				{Name: "sctp", Port: 9, Protocol: corev1.ProtocolSCTP},
			},
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "lb", Annotations: map[string]string{
			AnnotationPolicy: "builtin:least-conn", AnnotationLoadBalancerIPs: "192.0.2.10,2001:db8::10",
			AnnotationAddressPool: "public", AnnotationAllowSharedIP: "k"}},
			Spec: corev1.ServiceSpec{
				Type:                     corev1.ServiceTypeLoadBalancer,
				LoadBalancerClass:        ptr("switchyard.dev/lb"),
				Ports:                    []corev1.ServicePort{{Name: "https", Port: 443}},
				ExternalTrafficPolicy:    corev1.ServiceExternalTrafficPolicyLocal,
				ExternalIPs:              []string{"198.51.100.7"},
				LoadBalancerSourceRanges: []string{"203.0.113.0/24"},
				SessionAffinity:          corev1.ServiceAffinityClientIP,
				SessionAffinityConfig: &corev1.SessionAffinityConfig{
					ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr[int32](300)}},
				TrafficDistribution: ptr(model.DistributionPreferSameZone),
			}},
		{ObjectMeta: metav1.ObjectMeta{Name: "lb-cluster"}, Spec: corev1.ServiceSpec{
			Type:  corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80}},
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "ext"}, Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeExternalName, ExternalName: "db.example.org"}},
	}
	created := map[string]*corev1.Service{}
	for _, s := range svcs {
		created[s.Name] = must(c.CoreV1().Services(ns).Create(ctx, s, metav1.CreateOptions{}))
	}
	lb := created["lb"].DeepCopy()
	lb.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.10"}, {IP: "2001:db8::10"}}
	must(c.CoreV1().Services(ns).UpdateStatus(ctx, lb, metav1.UpdateOptions{}))

	key := func(name string) model.ServiceKey { return serviceKeyOf(ns, name) }
	cluster := func(name string) []netip.Addr { return ips(t, created[name].Spec.ClusterIPs) }
	nodePort := func(name string, i int) uint16 { return uint16(created[name].Spec.Ports[i].NodePort) }
	want := map[model.ServiceKey]model.ServiceState{
		key("cip"): {Service: &model.Service{Key: key("cip"), Type: model.ClusterIP, ClusterIPs: cluster("cip"),
			Ports: []model.ServicePort{
				{Name: "dns", Protocol: model.UDP, Port: 53},
				{Name: "http", Protocol: model.TCP, Port: 80},
			},
			InternalTrafficPolicy: model.PolicyLocal, AffinityTimeout: 10800 * time.Second}},
		// key("headless") is not watched: as kube-proxy, the Service
		// watch selects spec.clusterIP!=None (DNS serves headless ones).
		key("np"): {Service: &model.Service{Key: key("np"), Type: model.NodePort, ClusterIPs: cluster("np"),
			Ports: []model.ServicePort{
				{Name: "sctp", Protocol: model.SCTP, Port: 9, NodePort: nodePort("np", 1)},
				{Name: "http", Protocol: model.TCP, Port: 80, NodePort: nodePort("np", 0)},
			},
			ExternalTrafficPolicy: model.PolicyLocal}},
		key("lb"): {Service: &model.Service{Key: key("lb"), Type: model.LoadBalancer, ClusterIPs: cluster("lb"),
			ExternalIPs:              ips(t, []string{"198.51.100.7"}),
			LoadBalancerIPs:          ips(t, []string{"192.0.2.10", "2001:db8::10"}),
			LoadBalancerSourceRanges: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")},
			LoadBalancerClass:        "switchyard.dev/lb",
			RequestedIPs:             ips(t, []string{"192.0.2.10", "2001:db8::10"}),
			Ports:                    []model.ServicePort{{Name: "https", Protocol: model.TCP, Port: 443, NodePort: nodePort("lb", 0)}},
			ExternalTrafficPolicy:    model.PolicyLocal,
			HealthCheckNodePort:      uint16(created["lb"].Spec.HealthCheckNodePort),
			AffinityTimeout:          300 * time.Second,
			TrafficDistribution:      model.DistributionPreferSameZone,
			Policy:                   "builtin:least-conn",
			AddressPool:              "public",
			SharingKey:               "k",
		}},
		key("lb-cluster"): {Service: &model.Service{Key: key("lb-cluster"), Type: model.LoadBalancer,
			ClusterIPs: cluster("lb-cluster"),
			Ports:      []model.ServicePort{{Name: "http", Protocol: model.TCP, Port: 80, NodePort: nodePort("lb-cluster", 0)}}}},
		key("ext"): {Service: &model.Service{Key: key("ext"), Type: model.ExternalName}},
	}
	if len(want[key("np")].Service.ClusterIPs) != 2 || want[key("lb")].Service.HealthCheckNodePort == 0 {
		t.Fatalf("the API server did not allocate as expected: np %v, lb health check port %d",
			created["np"].Spec.ClusterIPs, created["lb"].Spec.HealthCheckNodePort)
	}
	w.services("every Service type and traffic policy", ns, want)
	if err := w.src.Healthy(); err != nil {
		t.Errorf("Healthy() = %v, want nil", err)
	}
}

func TestIntegrationEndpointChurn(t *testing.T) {
	srv := apitest.Start(t)
	c, ctx, ns := srv.Client, t.Context(), srv.Namespace(t)
	w := startWatcher(t, c)
	svc := must(c.CoreV1().Services(ns).Create(ctx, webService(ns, "web"), metav1.CreateOptions{}))
	web := modelWeb(t, svc)
	key := web.Key
	w.services("the Service", ns, map[model.ServiceKey]model.ServiceState{key: {Service: web}})

	trigger := time.Now().Add(time.Hour).Truncate(time.Second)
	a := testSlice{name: "web-a", service: "web", trigger: trigger,
		endpoints: []discoveryv1.Endpoint{readyEP("10.0.0.1", "n1"), readyEP("10.0.0.2", "n2")}}
	a.endpoints[0].Zone = ptr("z1")
	a.endpoints[0].Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "z1"}}}
	zoned := func(e *model.Endpoint) { e.Zone, e.HintZones = "z1", []string{"z1"} }
	createSlice(t, c, ns, a)
	w.services("endpoints added", ns, map[model.ServiceKey]model.ServiceState{key: {Service: web,
		Endpoints: eps(modelEP("10.0.0.1", "n1", zoned), modelEP("10.0.0.2", "n2"))}})
	if diff := cmp.Diff([]time.Time{trigger}, w.got.Triggers, cmp.Comparer(time.Time.Equal)); diff != "" {
		t.Errorf("trigger times (-want +got):\n%s", diff)
	}

	a.endpoints[0] = terminatingEP("10.0.0.1", "n1")
	a.trigger = time.Time{}
	began := time.Now()
	updateSlice(t, c, ns, a)
	servingTerminating := func(e *model.Endpoint) { e.Ready, e.Serving, e.Terminating = false, true, true }
	w.services("ready -> terminating", ns, map[model.ServiceKey]model.ServiceState{key: {Service: web,
		Endpoints: eps(modelEP("10.0.0.1", "n1", servingTerminating), modelEP("10.0.0.2", "n2"))}})
	t.Logf("slice update to Take: %s", time.Since(began).Round(time.Microsecond))

	a.endpoints = a.endpoints[1:]
	updateSlice(t, c, ns, a)
	w.services("terminating -> gone", ns, map[model.ServiceKey]model.ServiceState{key: {Service: web,
		Endpoints: eps(modelEP("10.0.0.2", "n2"))}})

	// A second slice repeats 10.0.0.2 not ready: the ready copy wins.
	b := testSlice{name: "web-b", service: "web", endpoints: []discoveryv1.Endpoint{
		terminatingEP("10.0.0.2", "n2"), readyEP("10.0.0.3", "n3")}}
	createSlice(t, c, ns, b)
	v6 := testSlice{name: "web-v6", service: "web", family: discoveryv1.AddressTypeIPv6,
		endpoints: []discoveryv1.Endpoint{readyEP("fd00::3", "n3")}}
	createSlice(t, c, ns, v6)
	w.services("a second slice and an IPv6 one", ns, map[model.ServiceKey]model.ServiceState{key: {Service: web,
		Endpoints: eps(modelEP("10.0.0.2", "n2"), modelEP("10.0.0.3", "n3"), modelEP("fd00::3", "n3"))}})

	if err := c.DiscoveryV1().EndpointSlices(ns).Delete(ctx, "web-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	w.services("the first slice deleted", ns, map[model.ServiceKey]model.ServiceState{key: {Service: web,
		Endpoints: eps(modelEP("10.0.0.2", "n2", servingTerminating), modelEP("10.0.0.3", "n3"), modelEP("fd00::3", "n3"))}})
}

func TestIntegrationServiceUpdateDelete(t *testing.T) {
	srv := apitest.Start(t)
	c, ctx, ns := srv.Client, t.Context(), srv.Namespace(t)
	svc := must(c.CoreV1().Services(ns).Create(ctx, webService(ns, "web"), metav1.CreateOptions{}))
	createSlice(t, c, ns, testSlice{name: "web-a", service: "web", endpoints: []discoveryv1.Endpoint{readyEP("10.0.0.1", "n1")}})
	w := startWatcher(t, c)
	web := modelWeb(t, svc)
	endpoints := eps(modelEP("10.0.0.1", "n1"))
	w.services("the initial list", ns, map[model.ServiceKey]model.ServiceState{web.Key: {Service: web, Endpoints: endpoints}})

	svc.Spec.Type = corev1.ServiceTypeNodePort
	svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	svc.Spec.Ports[0].Port = 8000
	svc = must(c.CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{}))
	updated := *web
	updated.Type, updated.ExternalTrafficPolicy = model.NodePort, model.PolicyLocal
	updated.Ports = []model.ServicePort{{Name: "http", Protocol: model.TCP, Port: 8000, NodePort: uint16(svc.Spec.Ports[0].NodePort)}}
	w.services("the update", ns, map[model.ServiceKey]model.ServiceState{web.Key: {Service: &updated, Endpoints: endpoints}})

	if err := c.CoreV1().Services(ns).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	w.services("the Service deleted, its slice left", ns, map[model.ServiceKey]model.ServiceState{web.Key: {Endpoints: endpoints}})
	if err := c.DiscoveryV1().EndpointSlices(ns).Delete(ctx, "web-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	w.services("the slice deleted too", ns, map[model.ServiceKey]model.ServiceState{})
}

// TestIntegrationServiceProxyName checks, against a real API server, that
// the label selectors of the watches leave out what kube-proxy leaves out:
// a Service labelled service.kubernetes.io/service-proxy-name for another
// proxy (its slices are watched, as kube-proxy watches them, and program
// nothing without their Service), headless Services, and EndpointSlices
// labelled service.kubernetes.io/headless; and that a Service relabelled
// to our name, or back to no name, is watched, while one relabelled to
// another proxy leaves.
func TestIntegrationServiceProxyName(t *testing.T) {
	srv := apitest.Start(t)
	c, ctx, ns := srv.Client, t.Context(), srv.Namespace(t)
	labelled := func(name, proxy string) *corev1.Service {
		svc := webService(ns, name)
		svc.Labels = map[string]string{LabelServiceProxyName: proxy}
		return svc
	}
	created := map[string]*corev1.Service{}
	for _, svc := range []*corev1.Service{
		webService(ns, "plain"),
		labelled("ours", "switchyard"),
		labelled("theirs", "other-proxy"),
	} {
		created[svc.Name] = must(c.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}))
	}
	headless := webService(ns, "headless")
	headless.Spec.ClusterIP = corev1.ClusterIPNone
	created["headless"] = must(c.CoreV1().Services(ns).Create(ctx, headless, metav1.CreateOptions{}))
	endpoints := map[string]discoveryv1.Endpoint{
		"plain": readyEP("10.0.0.1", "n1"), "ours": readyEP("10.0.0.2", "n1"),
		"theirs": readyEP("10.0.0.3", "n1"), "headless": readyEP("10.0.0.4", "n1"),
	}
	for name, ep := range endpoints {
		slice := testSlice{name: name + "-a", service: name, endpoints: []discoveryv1.Endpoint{ep}}.object(ns)
		// As the EndpointSlice controller labels them: the Service's
		// labels are copied, the headless label added for a headless one.
		for k, v := range created[name].GetLabels() {
			slice.Labels[k] = v
		}
		if name == "headless" {
			slice.Labels[LabelHeadless] = ""
		}
		must(c.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{}))
	}
	key := func(name string) model.ServiceKey { return serviceKeyOf(ns, name) }
	state := func(names ...string) map[model.ServiceKey]model.ServiceState {
		out := map[model.ServiceKey]model.ServiceState{}
		for name, ep := range endpoints {
			if name != "headless" {
				out[key(name)] = model.ServiceState{Endpoints: eps(modelEP(ep.Addresses[0], "n1"))}
			}
		}
		for _, name := range names {
			st := out[key(name)]
			st.Service = modelWeb(t, created[name])
			out[key(name)] = st
		}
		return out
	}
	relabel := func(name string, labels map[string]string) {
		t.Helper()
		svc := must(c.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{}))
		svc.Labels = labels
		must(c.CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{}))
	}

	w := startWatcher(t, c)
	w.services("unlabelled and ours watched; another proxy's, headless and headless slices not", ns,
		state("plain", "ours"))

	relabel("theirs", map[string]string{LabelServiceProxyName: "switchyard"})
	w.services("another proxy's Service relabelled to ours", ns, state("plain", "ours", "theirs"))

	relabel("ours", map[string]string{LabelServiceProxyName: "other-proxy"})
	w.services("ours relabelled to another proxy", ns, state("plain", "theirs"))

	relabel("theirs", nil)
	relabel("plain", map[string]string{LabelServiceProxyName: "switchyard"})
	w.services("moved between the watches: unlabelled and named ours", ns, state("plain", "theirs"))

	// A restarted Source lists what a running one watched.
	w.stop()
	w = startWatcher(t, c)
	w.services("after a restart", ns, state("plain", "theirs"))
}

func createNode(t *testing.T, c kubernetes.Interface, name, ip string) {
	t.Helper()
	n := must(c.CoreV1().Nodes().Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: map[string]string{corev1.LabelTopologyZone: "z-" + name}}}, metav1.CreateOptions{}))
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	must(c.CoreV1().Nodes().UpdateStatus(t.Context(), n, metav1.UpdateOptions{}))
}

func TestIntegrationSourceRestart(t *testing.T) {
	srv := apitest.Start(t)
	c, ctx, ns := srv.Client, t.Context(), srv.Namespace(t)
	createNode(t, c, "n1", "10.1.0.1")
	createNode(t, c, "n2", "10.1.0.2")
	var want map[model.ServiceKey]model.ServiceState = map[model.ServiceKey]model.ServiceState{}
	for i := range 20 {
		name := fmt.Sprintf("svc-%02d", i)
		svc := must(c.CoreV1().Services(ns).Create(ctx, webService(ns, name), metav1.CreateOptions{}))
		ip := fmt.Sprintf("10.0.%d.1", i)
		createSlice(t, c, ns, testSlice{name: name + "-a", service: name, endpoints: []discoveryv1.Endpoint{readyEP(ip, "n1")}})
		want[serviceKeyOf(ns, name)] = model.ServiceState{Service: modelWeb(t, svc), Endpoints: eps(modelEP(ip, "n1"))}
	}

	first := startWatcher(t, c)
	first.services("the first Source's view", ns, want)
	first.until("both nodes", func(r *reported) string {
		if len(r.Nodes) != 2 {
			return fmt.Sprintf("nodes %v", r.Nodes)
		}
		return ""
	})
	// Changes seen by the first Source, including one that is undone.
	updateSlice(t, c, ns, testSlice{name: "svc-00-a", service: "svc-00", endpoints: []discoveryv1.Endpoint{terminatingEP("10.0.0.1", "n1")}})
	must(c.CoreV1().Services(ns).Create(ctx, webService(ns, "late"), metav1.CreateOptions{}))
	if err := c.CoreV1().Services(ns).Delete(ctx, "svc-19", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	first.until("the changes", func(r *reported) string {
		st := r.Services[serviceKeyOf(ns, "svc-00")]
		_, late := r.Services[serviceKeyOf(ns, "late")]
		if len(st.Endpoints) != 1 || st.Endpoints[0].Ready || !late || r.Services[serviceKeyOf(ns, "svc-19")].Service != nil {
			return "changes not all reported yet"
		}
		return ""
	})
	first.stop()

	second := startWatcher(t, c)
	harness.Poll(t, waitTimeout, harness.Cond("the second Source to sync", second.src.HasSynced))
	var got reported
	got.apply(second.src.Take())
	if diff := cmp.Diff(first.got.Services, got.Services, deltaOpts...); diff != "" {
		t.Errorf("Services of the second Source's first Take differ from what the first reported (-first +second):\n%s", diff)
	}
	if diff := cmp.Diff(first.got.Nodes, got.Nodes, deltaOpts...); diff != "" {
		t.Errorf("Nodes of the second Source's first Take differ from what the first reported (-first +second):\n%s", diff)
	}
	if len(got.Services) < 21 {
		t.Errorf("second Source reported %d Services, want at least 21", len(got.Services))
	}
	if d := second.src.Take(); !d.Empty() {
		t.Errorf("second Take = %+v, want empty", d)
	}
}

func TestIntegrationAPIServerRestart(t *testing.T) {
	srv := apitest.Start(t)
	c, ctx, ns := srv.Client, t.Context(), srv.Namespace(t)
	createNode(t, c, "n1", "10.1.0.1")
	a := must(c.CoreV1().Services(ns).Create(ctx, webService(ns, "a"), metav1.CreateOptions{}))
	b := must(c.CoreV1().Services(ns).Create(ctx, webService(ns, "b"), metav1.CreateOptions{}))
	slice := testSlice{name: "a-1", service: "a", endpoints: []discoveryv1.Endpoint{readyEP("10.0.0.1", "n1")}}
	createSlice(t, c, ns, slice)
	w := startWatcher(t, c)
	want := map[model.ServiceKey]model.ServiceState{
		serviceKeyOf(ns, "a"): {Service: modelWeb(t, a), Endpoints: eps(modelEP("10.0.0.1", "n1"))},
		serviceKeyOf(ns, "b"): {Service: modelWeb(t, b)},
	}
	w.services("the initial state", ns, want)
	before := w.got

	srv.StopAPIServer(t)
	harness.Poll(t, waitTimeout, harness.Cond("Healthy() to report the lost API server", func() bool { return w.src.Healthy() != nil }))
	t.Logf("while the API server is down: %v", w.src.Healthy())
	if !w.src.HasSynced() {
		t.Errorf("HasSynced = false while the API server is down, want the synced state kept")
	}
	if d := w.src.Take(); !d.Empty() {
		t.Errorf("Take while the API server is down = %+v, want empty (state kept)", d)
	}

	srv.StartAPIServer(t)
	slice.endpoints = append(slice.endpoints, readyEP("10.0.0.2", "n1"))
	updateSlice(t, c, ns, slice)
	if err := c.CoreV1().Services(ns).Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cc := must(c.CoreV1().Services(ns).Create(ctx, webService(ns, "c"), metav1.CreateOptions{}))
	want = map[model.ServiceKey]model.ServiceState{
		serviceKeyOf(ns, "a"): {Service: modelWeb(t, a), Endpoints: eps(modelEP("10.0.0.1", "n1"), modelEP("10.0.0.2", "n1"))},
		serviceKeyOf(ns, "c"): {Service: modelWeb(t, cc)},
	}
	w.services("the changes made after the restart", ns, want)
	if diff := cmp.Diff(before.Nodes, w.got.Nodes, deltaOpts...); diff != "" {
		t.Errorf("Nodes changed across the restart (-before +after):\n%s", diff)
	}
	harness.Poll(t, waitTimeout, harness.Cond("Healthy() to recover", func() bool { return w.src.Healthy() == nil }))
}

func TestIntegrationRBACDenied(t *testing.T) {
	srv := apitest.Start(t)
	ctx := t.Context()
	alice := must(kubernetes.NewForConfig(srv.UserConfig(t, "alice")))
	w := startWatcher(t, alice)

	denied := regexp.MustCompile(`^cannot (list|watch) services: forbidden for user "alice": grant it with the ClusterRole in deploy/: `)
	harness.Poll(t, waitTimeout, harness.Cond("Healthy() to report the denial", func() bool { return w.src.Healthy() != nil }))
	if err := w.src.Healthy(); !denied.MatchString(err.Error()) {
		t.Errorf("Healthy() = %q, want it to match %s", err, denied)
	}
	if w.src.HasSynced() {
		t.Errorf("HasSynced without any permission")
	}

	grant := func(name string, rules ...rbacv1.PolicyRule) {
		must(srv.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}))
		must(srv.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}},
		}, metav1.CreateOptions{}))
	}
	grant("core", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"services", "nodes"}, Verbs: []string{"list", "watch"}})
	slicesDenied := regexp.MustCompile(`^cannot (list|watch) endpointslices.discovery.k8s.io: forbidden for user "alice": grant it with the ClusterRole in deploy/: `)
	harness.Poll(t, waitTimeout, harness.Cond("Healthy() to name only EndpointSlices", func() bool {
		err := w.src.Healthy()
		return err != nil && slicesDenied.MatchString(err.Error())
	}))
	t.Logf("with Services and Nodes granted: %v", w.src.Healthy())

	grant("slices", rbacv1.PolicyRule{APIGroups: []string{discoveryv1.GroupName}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}})
	harness.Poll(t, waitTimeout, harness.Cond("the caches to sync once granted", w.src.HasSynced))
	harness.Poll(t, waitTimeout, harness.Cond("Healthy() to recover", func() bool { return w.src.Healthy() == nil }))
}
