//go:build integration

package lbipam_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/switchyard-lb/switchyard/core/ipam"
	"github.com/switchyard-lb/switchyard/core/lbipam"
	"github.com/switchyard-lb/switchyard/test/apitest"
	"github.com/switchyard-lb/switchyard/test/harness"
)

const waitTimeout = 30 * time.Second

func ensureNamespace(t testing.TB, c kubernetes.Interface, name string) {
	t.Helper()
	_, err := c.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

// apiServer starts an API server holding the Lease namespace, and
// returns it with a client.
func apiServer(t *testing.T) (*apitest.Server, kubernetes.Interface) {
	t.Helper()
	s := apitest.Start(t)
	c := client(t, s, nil)
	ensureNamespace(t, c, lbipam.DefaultLeaseNamespace)
	return s, c
}

// client returns a client of its own, with a rate limit that does not
// slow the tests down; cut, when set, makes every request fail (a
// network partition).
func client(t testing.TB, s *apitest.Server, cut *atomic.Bool) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(s.Admin)
	cfg.QPS, cfg.Burst = 100, 200
	if cut != nil {
		cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(r *http.Request) (*http.Response, error) {
				if cut.Load() {
					return nil, errors.New("partitioned by the test")
				}
				return rt.RoundTrip(r)
			})
		}
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

type running struct {
	*lbipam.Controller
	stop func() // cancels Run and waits for it to return
}

// start runs a controller until stop or the end of the test.
func start(t testing.TB, cfg lbipam.Config) *running {
	t.Helper()
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	c, err := lbipam.New(cfg)
	if err != nil {
		t.Fatalf("lbipam.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx)
	}()
	r := &running{Controller: c, stop: func() { cancel(); <-done }}
	t.Cleanup(r.stop)
	return r
}

// tWriter sends the controller's log to the test log.
type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func waitLeader(t testing.TB, c *running) {
	t.Helper()
	harness.Poll(t, waitTimeout, func() error {
		if !c.IsLeader() {
			return errors.New("controller is not leading")
		}
		return nil
	})
}

type svcOpt func(*corev1.Service)

func ports(ps ...int32) svcOpt {
	return func(s *corev1.Service) {
		s.Spec.Ports = nil
		for _, p := range ps {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: fmt.Sprint("p", p), Port: p, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(p)})
		}
	}
}

func annotate(kv ...string) svcOpt {
	return func(s *corev1.Service) {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		for i := 0; i+1 < len(kv); i += 2 {
			s.Annotations[kv[i]] = kv[i+1]
		}
	}
}

func class(c string) svcOpt {
	return func(s *corev1.Service) { s.Spec.LoadBalancerClass = &c }
}

func createService(t testing.TB, c kubernetes.Interface, ns, name string, opts ...svcOpt) *corev1.Service {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeLoadBalancer,
			Selector: map[string]string{"app": name},
		},
	}
	ports(80)(svc)
	for _, o := range opts {
		o(svc)
	}
	out, err := c.CoreV1().Services(ns).Create(context.Background(), svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create Service %s/%s: %v", ns, name, err)
	}
	return out
}

func getService(t testing.TB, c kubernetes.Interface, ns, name string) *corev1.Service {
	t.Helper()
	svc, err := c.CoreV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get Service %s/%s: %v", ns, name, err)
	}
	return svc
}

func ingress(svc *corev1.Service) []string {
	var out []string
	for _, i := range svc.Status.LoadBalancer.Ingress {
		out = append(out, i.IP)
	}
	return out
}

// waitIngress waits until the Service publishes addresses and returns them.
func waitIngress(t testing.TB, c kubernetes.Interface, ns, name string) []string {
	t.Helper()
	var got []string
	harness.Poll(t, waitTimeout, func() error {
		got = ingress(getService(t, c, ns, name))
		if len(got) == 0 {
			return fmt.Errorf("Service %s/%s has no address", ns, name)
		}
		return nil
	})
	return got
}

// waitIngressEqual waits until the Service publishes exactly want.
func waitIngressEqual(t testing.TB, c kubernetes.Interface, ns, name string, want []string) {
	t.Helper()
	harness.Poll(t, waitTimeout, func() error {
		if diff := cmp.Diff(want, ingress(getService(t, c, ns, name))); diff != "" {
			return fmt.Errorf("Service %s/%s ingress (-want +got):\n%s", ns, name, diff)
		}
		return nil
	})
}

// waitFailed waits for an AllocationFailed Event on the Service whose
// message contains want, and returns the message.
func waitFailed(t testing.TB, c kubernetes.Interface, ns, name, want string) string {
	t.Helper()
	var msg string
	harness.Poll(t, waitTimeout, func() error {
		evs, err := c.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
			FieldSelector: fields.Set{"involvedObject.name": name, "reason": lbipam.ReasonAllocationFailed}.String(),
		})
		if err != nil {
			return err
		}
		var msgs []string
		for _, e := range evs.Items {
			if e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, want) {
				msg = e.Message
				return nil
			}
			msgs = append(msgs, e.Message)
		}
		return fmt.Errorf("no AllocationFailed Event on %s/%s containing %q (have %q)", ns, name, want, msgs)
	})
	return msg
}

// waitCondition waits for the controller's condition on the Service.
func waitCondition(t testing.TB, c kubernetes.Interface, ns, name string, status metav1.ConditionStatus) *metav1.Condition {
	t.Helper()
	var cond *metav1.Condition
	harness.Poll(t, waitTimeout, func() error {
		cond = meta.FindStatusCondition(getService(t, c, ns, name).Status.Conditions, lbipam.ConditionAddressAllocated)
		if cond == nil || cond.Status != status {
			return fmt.Errorf("Service %s/%s condition %s = %+v, want status %s", ns, name, lbipam.ConditionAddressAllocated, cond, status)
		}
		return nil
	})
	return cond
}

func deleteService(t testing.TB, c kubernetes.Interface, ns, name string) {
	t.Helper()
	if err := c.CoreV1().Services(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete Service %s/%s: %v", ns, name, err)
	}
}

// setup starts an API server and a controller whose pools serve only a
// fresh namespace, returned with the test client.
func setup(t *testing.T, pools func(ns string) []ipam.Pool, mod ...func(*lbipam.Config)) (kubernetes.Interface, string, *running) {
	t.Helper()
	s, c := apiServer(t)
	ns := s.Namespace(t)
	cfg := lbipam.Config{
		Client:   client(t, s, nil),
		Identity: "node-a",
		Pools:    pools(ns),
		// The defaults' lease: a shorter one is lost whenever the API
		// server stalls for two seconds (a loaded machine), and Stats
		// says nothing while it is.
	}
	for _, m := range mod {
		m(&cfg)
	}
	ctl := start(t, cfg)
	waitLeader(t, ctl)
	return c, ns, ctl
}

func pool(ns, name string, auto bool, addrs ...string) ipam.Pool {
	return ipam.Pool{Name: name, Addresses: addrs, AutoAssign: auto, Namespaces: []string{ns}}
}

func TestIntegrationAllocation(t *testing.T) {
	c, ns, ctl := setup(t, func(ns string) []ipam.Pool {
		return []ipam.Pool{
			pool(ns, "main", true, "198.51.100.10-198.51.100.19"),
			pool(ns, "reserved", false, "203.0.113.0/30"),
			pool(ns, "dual", false, "192.0.2.10-192.0.2.19", "2001:db8::10-2001:db8::1f"),
		}
	})

	t.Run("auto-assign", func(t *testing.T) {
		createService(t, c, ns, "a")
		createService(t, c, ns, "b")
		waitIngressEqual(t, c, ns, "a", []string{"198.51.100.10"})
		waitIngressEqual(t, c, ns, "b", []string{"198.51.100.11"})
		cond := waitCondition(t, c, ns, "a", metav1.ConditionTrue)
		if cond.Reason != lbipam.ReasonAllocated {
			t.Errorf("condition reason %q, want %q", cond.Reason, lbipam.ReasonAllocated)
		}
		stats := ctl.Stats()
		want := []ipam.PoolStats{{Pool: "main", Total: 10, Used: 2}, {Pool: "reserved", Total: 4}, {Pool: "dual", Total: 26}}
		if diff := cmp.Diff(want, stats); diff != "" {
			t.Errorf("Stats (-want +got):\n%s", diff)
		}
	})

	t.Run("named pool", func(t *testing.T) {
		createService(t, c, ns, "pooled", annotate(lbipam.AnnotationAddressPool, "reserved"))
		waitIngressEqual(t, c, ns, "pooled", []string{"203.0.113.0"})
	})

	t.Run("requested by spec.loadBalancerIP", func(t *testing.T) {
		createService(t, c, ns, "spec-ip", func(s *corev1.Service) { s.Spec.LoadBalancerIP = "198.51.100.15" })
		waitIngressEqual(t, c, ns, "spec-ip", []string{"198.51.100.15"})
	})

	t.Run("requested by annotation, outside auto-assign pools", func(t *testing.T) {
		createService(t, c, ns, "ann-ip", annotate(lbipam.AnnotationLoadBalancerIPs, "203.0.113.2"))
		waitIngressEqual(t, c, ns, "ann-ip", []string{"203.0.113.2"})
	})

	t.Run("requested address held by another Service", func(t *testing.T) {
		createService(t, c, ns, "thief", annotate(lbipam.AnnotationLoadBalancerIPs, "198.51.100.10"))
		msg := waitFailed(t, c, ns, "thief", "address conflict")
		t.Logf("event: %s", msg)
		waitCondition(t, c, ns, "thief", metav1.ConditionFalse)
		if got := ingress(getService(t, c, ns, "thief")); len(got) != 0 {
			t.Errorf("conflicting Service got %v", got)
		}
		waitIngressEqual(t, c, ns, "a", []string{"198.51.100.10"})
	})

	t.Run("requested address outside every pool", func(t *testing.T) {
		createService(t, c, ns, "outside", func(s *corev1.Service) { s.Spec.LoadBalancerIP = "10.99.0.1" })
		t.Logf("event: %s", waitFailed(t, c, ns, "outside", "outside every pool"))
		if got := ingress(getService(t, c, ns, "outside")); len(got) != 0 {
			t.Errorf("Service got %v", got)
		}
	})

	t.Run("unparsable requested address", func(t *testing.T) {
		createService(t, c, ns, "garbage", annotate(lbipam.AnnotationLoadBalancerIPs, "not-an-ip"))
		t.Logf("event: %s", waitFailed(t, c, ns, "garbage", "not an IP address"))
	})

	t.Run("unknown pool", func(t *testing.T) {
		createService(t, c, ns, "nopool", annotate(lbipam.AnnotationAddressPool, "nonexistent"))
		t.Logf("event: %s", waitFailed(t, c, ns, "nopool", "does not exist"))
	})

	t.Run("dual-stack", func(t *testing.T) {
		require := corev1.IPFamilyPolicyRequireDualStack
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe-dual"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, IPFamilyPolicy: &require,
				Ports: []corev1.ServicePort{{Port: 80}}},
		}
		if _, err := c.CoreV1().Services(ns).Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
			t.Skipf("the test API server does not serve dual-stack Services: %v", err)
		}
		dual := func(s *corev1.Service) {
			s.Spec.IPFamilyPolicy = &require
			s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}
		}
		createService(t, c, ns, "dual-auto", dual, annotate(lbipam.AnnotationAddressPool, "dual"))
		waitIngressEqual(t, c, ns, "dual-auto", []string{"2001:db8::10", "192.0.2.10"})
		createService(t, c, ns, "dual-requested", dual, annotate(lbipam.AnnotationLoadBalancerIPs, "192.0.2.15,2001:db8::15"))
		waitIngressEqual(t, c, ns, "dual-requested", []string{"2001:db8::15", "192.0.2.15"})
		prefer := corev1.IPFamilyPolicyPreferDualStack
		createService(t, c, ns, "dual-prefer", annotate(lbipam.AnnotationAddressPool, "main"), func(s *corev1.Service) {
			s.Spec.IPFamilyPolicy = &prefer
		})
		// main has no IPv6 addresses: PreferDualStack settles for IPv4.
		got := waitIngress(t, c, ns, "dual-prefer")
		if len(got) != 1 || !strings.HasPrefix(got[0], "198.51.100.") {
			t.Errorf("PreferDualStack from an IPv4 pool got %v, want one address of main", got)
		}
		createService(t, c, ns, "dual-missing", dual, annotate(lbipam.AnnotationAddressPool, "main"))
		t.Logf("event: %s", waitFailed(t, c, ns, "dual-missing", "IPv6"))
	})
}

func TestIntegrationSharing(t *testing.T) {
	c, ns, _ := setup(t, func(ns string) []ipam.Pool {
		return []ipam.Pool{pool(ns, "main", true, "198.51.100.10-198.51.100.19")}
	})
	key := annotate(lbipam.AnnotationAllowSharedIP, "edge")
	createService(t, c, ns, "http", key, ports(80))
	waitIngressEqual(t, c, ns, "http", []string{"198.51.100.10"})
	createService(t, c, ns, "https", key, ports(443))
	waitIngressEqual(t, c, ns, "https", []string{"198.51.100.10"})

	// Same key, clashing port: another address.
	createService(t, c, ns, "http2", key, ports(80))
	waitIngressEqual(t, c, ns, "http2", []string{"198.51.100.11"})
	// Same key, clashing port, asking for the shared address: an Event.
	createService(t, c, ns, "http3", key, ports(80, 8080), annotate(lbipam.AnnotationLoadBalancerIPs, "198.51.100.10"))
	t.Logf("event: %s", waitFailed(t, c, ns, "http3", "port TCP/80"))
	// No key: never shares.
	createService(t, c, ns, "alone", ports(8443), annotate(lbipam.AnnotationLoadBalancerIPs, "198.51.100.10"))
	t.Logf("event: %s", waitFailed(t, c, ns, "alone", "address conflict"))
	// Same key, free port, requesting the shared address: shares.
	createService(t, c, ns, "dns", key, ports(53), annotate(lbipam.AnnotationLoadBalancerIPs, "198.51.100.10"))
	waitIngressEqual(t, c, ns, "dns", []string{"198.51.100.10"})
}

func TestIntegrationExhaustionAndRelease(t *testing.T) {
	c, ns, ctl := setup(t, func(ns string) []ipam.Pool {
		return []ipam.Pool{pool(ns, "tiny", true, "198.51.100.10-198.51.100.11")}
	})
	createService(t, c, ns, "one")
	waitIngressEqual(t, c, ns, "one", []string{"198.51.100.10"})
	createService(t, c, ns, "two")
	waitIngressEqual(t, c, ns, "two", []string{"198.51.100.11"})

	createService(t, c, ns, "three")
	t.Logf("event: %s", waitFailed(t, c, ns, "three", "pool exhausted"))
	cond := waitCondition(t, c, ns, "three", metav1.ConditionFalse)
	if cond.Reason != lbipam.ReasonAllocationFailed {
		t.Errorf("condition reason %q, want %q", cond.Reason, lbipam.ReasonAllocationFailed)
	}
	if got := ingress(getService(t, c, ns, "three")); len(got) != 0 {
		t.Fatalf("Service beyond the pool got %v", got)
	}
	if diff := cmp.Diff([]ipam.PoolStats{{Pool: "tiny", Total: 2, Used: 2}}, ctl.Stats()); diff != "" {
		t.Errorf("Stats (-want +got):\n%s", diff)
	}

	t.Run("delete frees the address for the waiting Service", func(t *testing.T) {
		deleteService(t, c, ns, "one")
		waitIngressEqual(t, c, ns, "three", []string{"198.51.100.10"})
		waitCondition(t, c, ns, "three", metav1.ConditionTrue)
	})

	t.Run("type change releases", func(t *testing.T) {
		createService(t, c, ns, "four")
		waitFailed(t, c, ns, "four", "pool exhausted")
		svc := getService(t, c, ns, "two")
		svc.Spec.Type = corev1.ServiceTypeClusterIP
		for i := range svc.Spec.Ports {
			svc.Spec.Ports[i].NodePort = 0
		}
		if _, err := c.CoreV1().Services(ns).Update(context.Background(), svc, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("change type: %v", err)
		}
		waitIngressEqual(t, c, ns, "two", nil)
		harness.Poll(t, waitTimeout, func() error {
			if cond := meta.FindStatusCondition(getService(t, c, ns, "two").Status.Conditions, lbipam.ConditionAddressAllocated); cond != nil {
				return fmt.Errorf("condition still set: %+v", cond)
			}
			return nil
		})
		waitIngressEqual(t, c, ns, "four", []string{"198.51.100.11"})
	})
}

func TestIntegrationClassFiltering(t *testing.T) {
	t.Run("unclassed handled", func(t *testing.T) {
		c, ns, _ := setup(t, func(ns string) []ipam.Pool {
			return []ipam.Pool{pool(ns, "main", true, "198.51.100.10-198.51.100.19")}
		})
		foreign := createService(t, c, ns, "foreign", class("example.com/other"))
		// Another controller publishes an address of our pool for it.
		foreign.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.10"}}
		foreign, err := c.CoreV1().Services(ns).UpdateStatus(context.Background(), foreign, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("publish the foreign status: %v", err)
		}
		createService(t, c, ns, "ours", class(lbipam.DefaultClass))
		waitIngress(t, c, ns, "ours")
		createService(t, c, ns, "unclassed")
		waitIngress(t, c, ns, "unclassed")
		// The single worker processed "foreign" before the later Services.
		got := getService(t, c, ns, "foreign")
		if got.ResourceVersion != foreign.ResourceVersion {
			t.Errorf("foreign-class Service was written: resourceVersion %s -> %s, status %+v", foreign.ResourceVersion, got.ResourceVersion, got.Status)
		}
		evs, err := c.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=foreign"})
		if err != nil || len(evs.Items) != 0 {
			t.Errorf("Events on the foreign Service: %v %v", evs, err)
		}
	})
	t.Run("unclassed ignored", func(t *testing.T) {
		c, ns, _ := setup(t, func(ns string) []ipam.Pool {
			return []ipam.Pool{pool(ns, "main", true, "198.51.100.10-198.51.100.19")}
		}, func(cfg *lbipam.Config) { cfg.IgnoreUnclassed = true })
		unclassed := createService(t, c, ns, "unclassed")
		createService(t, c, ns, "ours", class(lbipam.DefaultClass))
		waitIngressEqual(t, c, ns, "ours", []string{"198.51.100.10"})
		if got := getService(t, c, ns, "unclassed"); got.ResourceVersion != unclassed.ResourceVersion {
			t.Errorf("unclassed Service was written though ignored: %+v", got.Status)
		}
	})
}

// published is a Service's addresses and resourceVersion: an unchanged
// resourceVersion proves the Service was not even rewritten.
type published struct {
	IPs []string
	RV  string
}

// snapshot returns every Service's published addresses.
func snapshot(t testing.TB, c kubernetes.Interface, ns string) map[string]published {
	t.Helper()
	list, err := c.CoreV1().Services(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]published{}
	for _, s := range list.Items {
		out[s.Name] = published{IPs: ingress(&s), RV: s.ResourceVersion}
	}
	return out
}

// watchDuplicates watches the namespace's Services, replaying their
// states in resourceVersion order, and fails the test at the end when at
// any point two Services published the same address without sharing it
// (same sharing key).
func watchDuplicates(t *testing.T, c kubernetes.Interface, ns string) {
	t.Helper()
	w, err := c.CoreV1().Services(ns).Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("watch Services: %v", err)
	}
	done := make(chan []string)
	go func() {
		type state struct {
			ips []string
			key string
		}
		cur := map[string]state{}
		var bad []string
		for ev := range w.ResultChan() {
			svc, ok := ev.Object.(*corev1.Service)
			if !ok {
				continue
			}
			if ev.Type == watch.Deleted {
				delete(cur, svc.Name)
				continue
			}
			st := state{ips: ingress(svc), key: svc.Annotations[lbipam.AnnotationAllowSharedIP]}
			cur[svc.Name] = st
			for name, o := range cur {
				if name == svc.Name || (st.key != "" && st.key == o.key) {
					continue
				}
				for _, ip := range st.ips {
					if slices.Contains(o.ips, ip) {
						bad = append(bad, fmt.Sprintf("%s published by %s and %s at resourceVersion %s", ip, svc.Name, name, svc.ResourceVersion))
					}
				}
			}
		}
		done <- bad
	}()
	t.Cleanup(func() {
		w.Stop()
		for _, b := range <-done {
			t.Errorf("duplicate address: %s", b)
		}
	})
}

func TestIntegrationTakeoverWaitsForStalePublisher(t *testing.T) {
	s, c := apiServer(t)
	ns := s.Namespace(t)
	watchDuplicates(t, c, ns)
	// While no allocator runs, x publishes 198.51.100.10 but its request
	// became invalid, and a waits for an address: the new leader gives
	// 198.51.100.10 to a, but only once x no longer publishes it. The
	// informer lists a first, so the worker meets it first.
	x := createService(t, c, ns, "x", annotate(lbipam.AnnotationLoadBalancerIPs, "garbage"))
	x.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.10"}}
	if _, err := c.CoreV1().Services(ns).UpdateStatus(context.Background(), x, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("publish x's address: %v", err)
	}
	createService(t, c, ns, "a")
	ctl := start(t, lbipam.Config{
		Client: client(t, s, nil), Identity: "node-a",
		Pools: []ipam.Pool{pool(ns, "tiny", true, "198.51.100.10/32")},
	})
	waitLeader(t, ctl)
	waitIngressEqual(t, c, ns, "a", []string{"198.51.100.10"})
	waitIngressEqual(t, c, ns, "x", nil)
	waitFailed(t, c, ns, "x", "not an IP address")
}

func TestIntegrationFailover(t *testing.T) {
	s, c := apiServer(t)
	ns := s.Namespace(t)
	watchDuplicates(t, c, ns)
	pools := []ipam.Pool{
		pool(ns, "main", true, "198.51.100.10-198.51.100.29", "2001:db8::10-2001:db8::2f"),
	}
	// The defaults: what the daemon runs with.
	cfg := func(id string, cl kubernetes.Interface) lbipam.Config {
		return lbipam.Config{Client: cl, Identity: id, Pools: pools}
	}
	a := start(t, cfg("node-a", client(t, s, nil)))
	waitLeader(t, a)
	var bCut atomic.Bool
	b := start(t, cfg("node-b", client(t, s, &bCut)))

	// Allocate in an order that differs from the order a fresh Sync would
	// use: deleting one Service leaves a hole a renumbering would fill.
	require := corev1.IPFamilyPolicyRequireDualStack
	for i := range 6 {
		createService(t, c, ns, fmt.Sprintf("svc-%d", 5-i))
	}
	createService(t, c, ns, "shared-a", annotate(lbipam.AnnotationAllowSharedIP, "k"), ports(80))
	createService(t, c, ns, "shared-b", annotate(lbipam.AnnotationAllowSharedIP, "k"), ports(443))
	createService(t, c, ns, "requested", annotate(lbipam.AnnotationLoadBalancerIPs, "198.51.100.29"))
	createService(t, c, ns, "dual", func(s *corev1.Service) { s.Spec.IPFamilyPolicy = &require })
	for _, n := range []string{"svc-0", "svc-1", "svc-2", "svc-3", "svc-4", "svc-5", "shared-a", "shared-b", "requested", "dual"} {
		waitIngress(t, c, ns, n)
	}
	deleteService(t, c, ns, "svc-4")
	waitCondition(t, c, ns, "dual", metav1.ConditionTrue)
	if b.IsLeader() {
		t.Fatal("two leaders")
	}
	before := snapshot(t, c, ns)
	t.Logf("before failover: %v", before)

	// takeOver stops the leader with stop and measures (logs) until next leads,
	// then checks that nothing was renumbered (not even rewritten) and
	// that next allocates a new Service.
	takeOver := func(t *testing.T, stop func(), next *running, newSvc string) {
		began := time.Now()
		stop()
		harness.Poll(t, 30*time.Second, func() error {
			if !next.IsLeader() {
				return errors.New("no new leader")
			}
			return nil
		})
		took := time.Since(began)
		createService(t, c, ns, newSvc)
		got := waitIngress(t, c, ns, newSvc)
		allocated := time.Since(began)
		t.Logf("failover: new leader acting after %s, new Service allocated %v after %s", took.Round(time.Millisecond), got, allocated.Round(time.Millisecond))
		after := snapshot(t, c, ns)
		delete(after, newSvc)
		if diff := cmp.Diff(before, after); diff != "" {
			t.Errorf("statuses changed across the failover (-before +after):\n%s", diff)
		}
		for n, p := range after {
			for _, ip := range got {
				if slices.Contains(p.IPs, ip) {
					t.Errorf("new Service got %s, already held by %s", ip, n)
				}
			}
		}
		before = snapshot(t, c, ns)
	}

	t.Run("graceful stop", func(t *testing.T) {
		// A graceful stop releases the Lease: the next candidate finds
		// it free at its next retry instead of waiting for it to expire.
		// Asserted on the Lease, not on the takeover's time (reported).
		takeOver(t, func() {
			a.stop()
			l, err := c.CoordinationV1().Leases(lbipam.DefaultLeaseNamespace).Get(context.Background(), lbipam.DefaultLeaseName, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("read the Lease after the stop: %v", err)
			}
			if h := l.Spec.HolderIdentity; h != nil && *h == "node-a" {
				t.Errorf("the stopped controller still holds the Lease (not released)")
			}
		}, b, "after-graceful")
		if a.IsLeader() {
			t.Error("stopped controller still reports leading")
		}
	})

	t.Run("partitioned leader", func(t *testing.T) {
		cc := start(t, cfg("node-c", client(t, s, nil)))
		// Takeover waits for the Lease to expire: LeaseDuration after
		// the candidate last saw it renewed (up to one jittered retry,
		// 2.2 RetryPeriods, after the partition), then one more retry.
		// Reported by takeOver, not asserted.
		takeOver(t, func() { bCut.Store(true) }, cc, "after-partition")
		harness.Poll(t, waitTimeout, func() error {
			if b.IsLeader() {
				return errors.New("partitioned controller still acting")
			}
			return nil
		})
		if a.IsLeader() {
			t.Error("stopped controller leads")
		}
	})
}

func TestIntegrationNamespaceSelectors(t *testing.T) {
	s, c := apiServer(t)
	ns1, ns2 := s.Namespace(t), s.Namespace(t)
	main := ipam.Pool{Name: "main", Addresses: []string{"198.51.100.10-198.51.100.19"}, AutoAssign: true, Namespaces: []string{ns1, ns2}}
	ctl := start(t, lbipam.Config{Client: client(t, s, nil), Identity: "node-a", Pools: []ipam.Pool{main}})
	waitLeader(t, ctl)
	createService(t, c, ns1, "s1")
	waitIngressEqual(t, c, ns1, "s1", []string{"198.51.100.10"})

	// The pool now wants namespaces labelled team=a: the controller
	// starts watching Namespaces, and s1's unlabelled namespace loses
	// the address.
	main.NamespaceSelectors = []ipam.Selector{{MatchLabels: map[string]string{"team": "a"}}}
	if err := ctl.SetPools([]ipam.Pool{main}); err != nil {
		t.Fatal(err)
	}
	waitIngressEqual(t, c, ns1, "s1", nil)
	t.Logf("event: %s", waitFailed(t, c, ns1, "s1", "no auto-assign pool allows the Service"))
	createService(t, c, ns2, "s2")
	waitFailed(t, c, ns2, "s2", "no auto-assign pool allows the Service")

	// Labelling the namespace is enough for its Services to get addresses.
	n, err := c.CoreV1().Namespaces().Get(context.Background(), ns1, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Labels["team"] = "a"
	if _, err := c.CoreV1().Namespaces().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitIngressEqual(t, c, ns1, "s1", []string{"198.51.100.10"})
	if got := ingress(getService(t, c, ns2, "s2")); len(got) != 0 {
		t.Errorf("Service in an unselected namespace got %v", got)
	}
}
