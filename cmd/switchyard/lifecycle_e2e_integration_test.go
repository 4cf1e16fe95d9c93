//go:build integration

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/switchyard-lb/switchyard/test/apitest"
)

// lifecycleCluster creates node-a and three Services with endpoints, and
// returns the namespace.
func lifecycleCluster(t *testing.T, client kubernetes.Interface) string {
	t.Helper()
	ns := "e2e-lifecycle"
	if _, err := client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createNode(t, client, "node-a", "192.168.0.10")
	v4 := discoveryv1.AddressTypeIPv4
	createAll(t, client, ns, []*corev1.Service{
		e2eService("web"),
		e2eService("api", func(s *corev1.ServiceSpec) { s.Type = corev1.ServiceTypeNodePort }),
		e2eService("db", func(s *corev1.ServiceSpec) { s.ExternalIPs = []string{"198.51.100.9"} }),
	}, []*discoveryv1.EndpointSlice{
		e2eSlice("web", "web-1", v4, nil, readyAt("10.2.0.1", "node-a"), readyAt("10.2.0.2", "node-b")),
		e2eSlice("api", "api-1", v4, nil, readyAt("10.2.1.1", "node-a")),
		e2eSlice("db", "db-1", v4, nil, readyAt("10.2.2.1", "node-b")),
	})
	return ns
}

// waitTableLines polls until the daemon's last applied table has n lines
// and returns it.
func waitTableLines(t *testing.T, d *e2eDaemon, n int) []string {
	t.Helper()
	var last []string
	poll(t, 60*time.Second, func() error {
		tables := d.dp.Tables()
		if len(tables) == 0 {
			return fmt.Errorf("nothing applied yet")
		}
		last = tables[len(tables)-1]
		if len(last) != n {
			return fmt.Errorf("last table has %d lines, want %d:\n%s", len(last), n, strings.Join(last, "\n"))
		}
		return nil
	})
	return last
}

// missing returns the lines of want that got lacks.
func missing(want, got []string) []string {
	var out []string
	for _, w := range want {
		if !slices.Contains(got, w) {
			out = append(out, w)
		}
	}
	return out
}

// TestIntegrationE2EDaemonRestart stops a daemon and starts a new one
// against the same API server: the new one's first applied table is the
// old one's last, and no table it applies on the way lacks anything (no
// transient deletion). /debug/state is polled from the start to
// readiness too: it never shows an applied plan without a Service.
func TestIntegrationE2EDaemonRestart(t *testing.T) {
	srv := apitest.Start(t)
	ns := lifecycleCluster(t, srv.Client)
	// Enough Services that the initial lists take a while: a daemon that
	// applied before every cache synced would drop some of them.
	const bulk = 300
	var bulkSvcs []*corev1.Service
	var bulkSlices []*discoveryv1.EndpointSlice
	for i := range bulk {
		name := fmt.Sprintf("bulk-%d", i)
		bulkSvcs = append(bulkSvcs, e2eService(name))
		bulkSlices = append(bulkSlices, e2eSlice(name, name+"-1", discoveryv1.AddressTypeIPv4, nil,
			readyAt(fmt.Sprintf("10.3.%d.%d", i/200, i%200+1), "node-b")))
	}
	createAll(t, srv.Client, ns, bulkSvcs, bulkSlices)

	// ClusterIP x3, NodePort, ExternalIP, the bulk ClusterIPs, and the API
	// server's own default/kubernetes ClusterIP.
	const lines = 6 + bulk
	old := startE2E(t, srv.Admin, "node-a", "")
	old.waitReady(t, 60*time.Second)
	before := waitTableLines(t, old, lines)
	old.Stop(t)

	began := time.Now()
	d := startE2E(t, srv.Admin, "node-a", "")
	var polls, emptyPolls int
	for {
		code, _ := d.readyz()
		if st, err := d.applied(ns); err == nil {
			polls++
			switch len(st) {
			case 0:
				emptyPolls++ // nothing applied yet
			case 3 + bulk:
			default:
				t.Errorf("/debug/state applied %d of the %d Services", len(st), 3+bulk)
			}
		}
		if code == http.StatusOK {
			break
		}
		if time.Since(began) > 60*time.Second {
			t.Fatal("the restarted daemon was not ready after 60s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("restarted daemon ready after %s; %d polls of /debug/state, %d before the first apply",
		time.Since(began).Round(time.Millisecond), polls, emptyPolls)

	tables := d.dp.Tables()
	if len(tables) == 0 {
		t.Fatal("the restarted daemon is ready but applied nothing")
	}
	if diff := cmp.Diff(before, tables[0]); diff != "" {
		t.Errorf("first table after the restart differs from the last before it (-before +after):\n%s", diff)
	}
	for i, tb := range tables {
		if m := missing(before, tb); len(m) > 0 {
			t.Errorf("table %d of %d after the restart lacks %q", i+1, len(tables), m)
		}
	}
	t.Logf("%d tables applied by the restarted daemon, each with all %d virtual services", len(tables), lines)
}

// TestIntegrationE2EAPIServerRestart stops kube-apiserver under a running
// daemon: the daemon keeps its last plan and says on /readyz that the
// watch fails; once the API server is back, a change made after the
// restart reaches the plan and /readyz recovers.
func TestIntegrationE2EAPIServerRestart(t *testing.T) {
	srv := apitest.Start(t)
	ns := lifecycleCluster(t, srv.Client)
	// A short sync period, so that periodic full resyncs run during the
	// outage.
	d := startE2E(t, srv.Admin, "node-a", "dataplane:\n  mode: dryrun\n  syncPeriod: 1s\n  minSyncPeriod: 100ms\n")
	d.waitReady(t, 60*time.Second)
	before := waitTableLines(t, d, 6)
	applies := len(d.dp.Tables())

	srv.StopAPIServer(t)
	stopped := time.Now()
	atStop := len(d.dp.Tables())
	var code int
	var body string
	// The watches notice a closed connection at once and fail to
	// re-establish; give them the reflector's first backoffs.
	for time.Since(stopped) < 30*time.Second {
		if code, body = d.readyz(); code != http.StatusOK {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("/readyz %s after kube-apiserver stopped: %d %q", time.Since(stopped).Round(time.Millisecond), code, body)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "watching Kubernetes") {
		t.Errorf("/readyz with the API server down = %d %q, want 503 naming the failing watch", code, body)
	}
	// The plan stays: every table applied during the outage (periodic
	// resyncs) still has everything. Wait for two resyncs, or 10s.
	for deadline := time.Now().Add(10 * time.Second); len(d.dp.Tables()) < atStop+2 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	tables := d.dp.Tables()
	t.Logf("%d tables applied in the first %s of the outage", len(tables)-atStop, time.Since(stopped).Round(time.Millisecond))
	for i, tb := range tables[applies:] {
		if m := missing(before, tb); len(m) > 0 {
			t.Errorf("table %d applied during the outage lacks %q", i+1, m)
		}
	}
	if got := tables[len(tables)-1]; !cmp.Equal(before, got) {
		t.Errorf("table changed during the outage (-before +now):\n%s", cmp.Diff(before, got))
	}

	srv.StartAPIServer(t)
	t.Logf("kube-apiserver back after %s", time.Since(stopped).Round(time.Millisecond))
	slice, err := srv.Client.DiscoveryV1().EndpointSlices(ns).Get(t.Context(), "web-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	slice.Endpoints = append(slice.Endpoints, e2eSlice("web", "x", discoveryv1.AddressTypeIPv4, nil, readyAt("10.2.0.3", "node-b")).Endpoints...)
	if _, err := srv.Client.DiscoveryV1().EndpointSlices(ns).Update(t.Context(), slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	changed := time.Now()
	poll(t, 90*time.Second, func() error {
		st, err := d.applied(ns)
		if err != nil {
			return err
		}
		for _, vs := range st["web"].VirtualServices {
			if len(vs.Destinations) == 3 {
				return nil
			}
		}
		return fmt.Errorf("web not yet at 3 destinations: %+v", st["web"].VirtualServices)
	})
	t.Logf("a change made after the restart applied in %s", time.Since(changed).Round(time.Millisecond))
	d.waitReady(t, 60*time.Second)
	for i, tb := range d.dp.Tables()[applies:] {
		if m := missing(before, tb); len(m) > 0 && !strings.Contains(strings.Join(m, ""), "10.2.0.2:8080/1") {
			t.Errorf("table %d since the outage began lacks %q", i+1, m)
		}
	}
}

// TestIntegrationE2ERBACDenied runs the daemon as the deploy/
// ServiceAccount with deploy/rbac.yaml minus the EndpointSlice rule: the
// denial is logged naming the resource, the user and the ClusterRole fix,
// the daemon is not ready, and granting the rule back lets it catch up.
func TestIntegrationE2ERBACDenied(t *testing.T) {
	srv := apitest.Start(t)
	lifecycleCluster(t, srv.Client)
	for _, f := range []string{"namespace.yaml", "serviceaccount.yaml", "rbac.yaml"} {
		if _, err := srv.Kubectl(t, "apply", "-f", "../../deploy/"+f); err != nil {
			t.Fatal(err)
		}
	}
	roles := srv.Client.RbacV1().ClusterRoles()
	role, err := roles.Get(t.Context(), "switchyard", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	full := role.DeepCopy()
	role.Rules = slices.DeleteFunc(role.Rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.Resources, "endpointslices") })
	if len(role.Rules) != len(full.Rules)-1 {
		t.Fatalf("deploy/rbac.yaml has %d rules naming endpointslices, want 1", len(full.Rules)-len(role.Rules))
	}
	if role, err = roles.Update(t.Context(), role, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	d := startE2E(t, srv.ServiceAccountConfig(t, "switchyard-system", "switchyard"), "node-a", "")
	// The text handler quotes the error; the user name's quotes are
	// escaped in it.
	wantLog := []string{
		`msg="Kubernetes API request failed"`,
		`resource=endpointslices.discovery.k8s.io`,
		`cannot list endpointslices.discovery.k8s.io: forbidden for user`,
		`system:serviceaccount:switchyard-system:switchyard`,
		`grant it with the ClusterRole in deploy/`,
	}
	poll(t, 60*time.Second, func() error {
		for _, line := range strings.Split(d.Logs.String(), "\n") {
			if !slices.ContainsFunc(wantLog, func(w string) bool { return !strings.Contains(line, w) }) {
				return nil
			}
		}
		return fmt.Errorf("no log line with all of %q yet", wantLog)
	})
	code, body := d.readyz()
	t.Logf("/readyz while denied: %d %q", code, body)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "cannot list endpointslices.discovery.k8s.io: forbidden") {
		t.Errorf("/readyz while denied = %d %q, want 503 naming the denied endpointslices", code, body)
	}
	if got := len(d.dp.Tables()); got != 0 {
		t.Errorf("the daemon applied %d tables without EndpointSlices, want none", got)
	}

	role.Rules = full.Rules
	if _, err := roles.Update(t.Context(), role, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	granted := time.Now()
	d.waitReady(t, 90*time.Second)
	waitTableLines(t, d, 6)
	t.Logf("ready and applied %s after the ClusterRole was fixed", time.Since(granted).Round(time.Millisecond))
}

// TestIntegrationE2EChurn drives one Service through endpoint churn
// (added, ready -> serving+terminating -> gone), a port update and a
// delete, while a second Service stays as it is: each step reaches the
// applied table, and no table ever applied lacks the bystander.
func TestIntegrationE2EChurn(t *testing.T) {
	srv := apitest.Start(t)
	ns := lifecycleCluster(t, srv.Client)
	client := srv.Client
	d := startE2E(t, srv.Admin, "node-a", "")
	d.waitReady(t, 60*time.Second)
	before := waitTableLines(t, d, 6)
	var bystander []string // db's lines: never touched
	for _, l := range before {
		if strings.Contains(l, "10.2.2.1:8080") {
			bystander = append(bystander, l)
		}
	}
	if len(bystander) != 2 {
		t.Fatalf("db has %d lines in %q, want ClusterIP and ExternalIP", len(bystander), before)
	}

	web, err := client.CoreV1().Services(ns).Get(t.Context(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	webVS := func(port int, dests ...string) string {
		line := fmt.Sprintf("TCP %s:%d rr ->", web.Spec.ClusterIP, port)
		for _, d := range dests {
			line += " " + d + "/1"
		}
		return line
	}
	waitLine := func(step, want string) {
		t.Helper()
		began := time.Now()
		poll(t, 30*time.Second, func() error {
			tables := d.dp.Tables()
			if last := tables[len(tables)-1]; !slices.Contains(last, want) {
				return fmt.Errorf("%s: table lacks %q:\n%s", step, want, strings.Join(last, "\n"))
			}
			return nil
		})
		t.Logf("%s: applied in %s", step, time.Since(began).Round(time.Millisecond))
	}
	setEndpoints := func(step string, eps ...e2eEndpoint) {
		t.Helper()
		s, err := client.DiscoveryV1().EndpointSlices(ns).Get(t.Context(), "web-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.Endpoints = e2eSlice("web", "web-1", discoveryv1.AddressTypeIPv4, nil, eps...).Endpoints
		if _, err := client.DiscoveryV1().EndpointSlices(ns).Update(t.Context(), s, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	a, b, c := readyAt("10.2.0.1", "node-a"), readyAt("10.2.0.2", "node-b"), readyAt("10.2.0.3", "node-b")
	setEndpoints("add", a, b, c)
	waitLine("endpoint added", webVS(80, "10.2.0.1:8080", "10.2.0.2:8080", "10.2.0.3:8080"))

	// c terminates while still serving: dropped, as ready ones remain.
	c.ready, c.terminating = false, true
	setEndpoints("terminating", a, b, c)
	waitLine("endpoint terminating", webVS(80, "10.2.0.1:8080", "10.2.0.2:8080"))

	// Every endpoint terminating and serving: they carry the traffic.
	a.ready, a.terminating, b.ready, b.terminating = false, true, false, true
	setEndpoints("all terminating", a, b, c)
	waitLine("all endpoints terminating", webVS(80, "10.2.0.1:8080", "10.2.0.2:8080", "10.2.0.3:8080"))

	setEndpoints("gone")
	waitLine("endpoints gone", webVS(80))

	web.Spec.Ports[0].Port = 8000
	if web, err = client.CoreV1().Services(ns).Update(t.Context(), web, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitLine("port updated", webVS(8000))
	if tables := d.dp.Tables(); slices.Contains(tables[len(tables)-1], webVS(80)) {
		t.Errorf("the old port 80 stays in the table after the update")
	}

	if err := client.CoreV1().Services(ns).Delete(t.Context(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	poll(t, 30*time.Second, func() error {
		tables := d.dp.Tables()
		for _, l := range tables[len(tables)-1] {
			if strings.Contains(l, web.Spec.ClusterIP+":") {
				return fmt.Errorf("deleted Service still in the table: %q", l)
			}
		}
		return nil
	})
	t.Logf("Service delete: applied in %s", time.Since(began).Round(time.Millisecond))

	tables := d.dp.Tables()
	for i, tb := range tables {
		if m := missing(bystander, tb); len(m) > 0 {
			t.Errorf("table %d of %d lacks the untouched Service's %q", i+1, len(tables), m)
		}
	}
	t.Logf("%d tables applied, each with the untouched Service", len(tables))
}

// TestIntegrationE2EHealthzNodeDeletion follows KEP-3836 against the real
// API server: /healthz fails while this node's Node carries the cluster
// autoscaler's ToBeDeletedByClusterAutoscaler taint, recovers when the
// taint goes, fails again once the Node has a deletionTimestamp (a
// finalizer holds it) and stays failed when the Node is gone. /livez
// answers 200 throughout, and the daemon keeps serving its table.
func TestIntegrationE2EHealthzNodeDeletion(t *testing.T) {
	srv := apitest.Start(t)
	createNode(t, srv.Client, "node-a", "192.168.0.10")
	d := startE2E(t, srv.Admin, "node-a", "")
	d.waitReady(t, 60*time.Second)
	waitHealthz(t, d.tc.Health, http.StatusOK, true)

	patch := func(p any) {
		t.Helper()
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := srv.Client.CoreV1().Nodes().Patch(t.Context(), "node-a", types.MergePatchType, b, metav1.PatchOptions{}); err != nil {
			t.Fatalf("patch Node node-a with %s: %v", b, err)
		}
	}
	patch(map[string]any{"spec": map[string]any{"taints": []corev1.Taint{
		{Key: "ToBeDeletedByClusterAutoscaler", Value: "1764633600", Effect: corev1.TaintEffectNoSchedule}}}})
	waitHealthz(t, d.tc.Health, http.StatusServiceUnavailable, false)
	patch(map[string]any{"spec": map[string]any{"taints": nil}})
	waitHealthz(t, d.tc.Health, http.StatusOK, true)

	patch(map[string]any{"metadata": map[string]any{"finalizers": []string{"example.com/hold"}}})
	if err := srv.Client.CoreV1().Nodes().Delete(t.Context(), "node-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitHealthz(t, d.tc.Health, http.StatusServiceUnavailable, false)
	patch(map[string]any{"metadata": map[string]any{"finalizers": nil}})
	poll(t, 60*time.Second, func() error {
		_, err := srv.Client.CoreV1().Nodes().Get(t.Context(), "node-a", metav1.GetOptions{})
		if err == nil {
			return errors.New("the Node is still there")
		}
		return nil
	})
	// A Service created now is applied by a sync after the deletion.
	createAll(t, srv.Client, "default", []*corev1.Service{e2eService("late")}, nil)
	poll(t, 60*time.Second, func() error {
		st, err := d.applied("default")
		if err != nil {
			return err
		}
		if _, ok := st["late"]; !ok {
			return errors.New("default/late not applied yet")
		}
		return nil
	})
	waitHealthz(t, d.tc.Health, http.StatusServiceUnavailable, false)
	if code, body := d.readyz(); code != http.StatusOK {
		t.Errorf("/readyz with the Node gone = %d %q, want 200: readiness does not follow the Node", code, body)
	}
}
