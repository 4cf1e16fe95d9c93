package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/switchyard-lb/switchyard/core/config"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/ipvs/dryrun"
)

func testService(ns, name, clusterIP string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			Type:       corev1.ServiceTypeClusterIP,
			ClusterIP:  clusterIP,
			ClusterIPs: []string{clusterIP},
			Ports: []corev1.ServicePort{{
				Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080),
			}},
		},
	}
}

func testSlice(ns, service string, addrs ...string) *discoveryv1.EndpointSlice {
	ready := true
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: service + "-abc",
			Labels: map[string]string{discoveryv1.LabelServiceName: service},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{{
			Name: ptr("http"), Protocol: ptr(corev1.ProtocolTCP), Port: ptr(int32(8080)),
		}},
	}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: &ready},
		})
	}
	return s
}

func ptr[T any](v T) *T { return &v }

// daemonUnderTest runs runDaemon against a fake clientset.
type daemonUnderTest struct {
	tc     *testConfig
	logs   *syncBuffer
	dp     *dryrun.Dataplane
	client *fake.Clientset
	cancel context.CancelFunc
	done   chan error
}

func startDaemon(t *testing.T, extraConfig string) *daemonUnderTest {
	t.Helper()
	return startDaemonWith(t, extraConfig, func(d *daemonUnderTest, _ *config.Config) (plugin.Dataplane, error) {
		d.dp = dryrun.New()
		return d.dp, nil
	})
}

// startDaemonWith is startDaemon with the dataplane newDataplane makes
// from the config (d.dp stays nil unless it sets it).
func startDaemonWith(t *testing.T, extraConfig string, newDataplane func(*daemonUnderTest, *config.Config) (plugin.Dataplane, error)) *daemonUnderTest {
	t.Helper()
	d := &daemonUnderTest{tc: writeTestConfig(t, extraConfig), logs: &syncBuffer{}, done: make(chan error, 1)}
	w, err := config.NewWatcher(d.tc.path, checkDataplane)
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}},
		testService("default", "web", "10.96.0.10"),
		testSlice("default", "web", "10.1.0.1", "10.1.0.2"),
	)
	d.client = client
	ctx, cancel := context.WithCancel(t.Context())
	d.cancel = cancel
	go func() {
		d.done <- runDaemon(ctx, daemonConfig{
			Watcher:  w,
			Client:   client,
			NodeName: "node-a",
			Log:      slog.New(slog.NewJSONHandler(d.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			NewDataplane: func(cfg *config.Config) (plugin.Dataplane, error) {
				return newDataplane(d, cfg)
			},
			ConfigPollInterval: 10 * time.Millisecond,
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-d.done
		if t.Failed() {
			t.Logf("daemon logs:\n%s", d.logs.String())
		}
	})
	return d
}

// waitPlan polls /debug/state until its virtual services are want.
func (d *daemonUnderTest) waitPlan(t *testing.T, want []string) {
	t.Helper()
	poll(t, 30*time.Second, func() error {
		st, err := getState(d.tc.metrics)
		if err != nil {
			return err
		}
		if diff := cmp.Diff(want, vsSummary(st)); diff != "" {
			return fmt.Errorf("plan mismatch (-want +got):\n%s", diff)
		}
		return nil
	})
}

func TestDaemonServesPlanAndShutsDownWithoutFlushing(t *testing.T) {
	d := startDaemon(t, "")
	want := []string{"default/web ClusterIP TCP 10.96.0.10:80 rr -> 10.1.0.1:8080 10.1.0.2:8080"}
	d.waitPlan(t, want)

	poll(t, 30*time.Second, func() error {
		code, body, err := httpGet("http://" + d.tc.health + "/readyz")
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("/readyz = %d %q %v", code, body, err)
		}
		return nil
	})
	checks := []struct {
		path     string
		addr     string
		wantCode int
		wantBody string
	}{
		{"/livez", d.tc.health, 200, "ok"},
		{"/healthz", d.tc.health, 200, `"lastUpdated": "2`},
		{"/metrics", d.tc.metrics, 200, "switchyard_sync_duration_seconds_count"},
		{"/metrics", d.tc.metrics, 200, "go_goroutines"},
		{"/debug/state", d.tc.metrics, 200, `"node": "node-a"`},
		{"/readyz", d.tc.metrics, 404, ""},
	}
	for _, c := range checks {
		code, body, err := httpGet("http://" + c.addr + c.path)
		if err != nil || code != c.wantCode || !strings.Contains(body, c.wantBody) {
			t.Errorf("GET %s = %d %v, want %d with %q; body:\n%.500s", c.path, code, err, c.wantCode, c.wantBody, body)
		}
	}

	d.cancel()
	if err := <-d.done; err != nil {
		t.Errorf("runDaemon after cancel = %v, want nil", err)
	}
	d.done <- nil // for Cleanup
	// Shutting down leaves the dataplane's table as it was.
	if got := d.dp.String(); !strings.Contains(got, "10.96.0.10:80") {
		t.Errorf("dataplane table after shutdown lost the service:\n%s", got)
	}
	if _, _, err := httpGet("http://" + d.tc.health + "/livez"); err == nil {
		t.Error("health server still serving after shutdown")
	}
}

// TestDaemonSchedulerAnnotation checks that the planner takes the
// switchyard.dev/scheduler annotation from the dataplane's schedulers
// (the dry run's, IPVS'), before and after a reload of the default
// scheduler: a supported name wins, an unknown one falls back silently.
func TestDaemonSchedulerAnnotation(t *testing.T) {
	d := startDaemon(t, "")
	for _, s := range []struct{ name, ip, scheduler string }{{"pinned", "10.96.0.11", "mh"}, {"unknown", "10.96.0.12", "fastest"}} {
		svc := testService("default", s.name, s.ip)
		svc.Annotations = map[string]string{"switchyard.dev/scheduler": s.scheduler}
		if _, err := d.client.CoreV1().Services("default").Create(t.Context(), svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	d.waitPlan(t, []string{
		"default/pinned ClusterIP TCP 10.96.0.11:80 mh ->",
		"default/unknown ClusterIP TCP 10.96.0.12:80 rr ->",
		"default/web ClusterIP TCP 10.96.0.10:80 rr -> 10.1.0.1:8080 10.1.0.2:8080",
	})
	d.tc.write(t, "dataplane:\n  mode: dryrun\n  ipvs:\n    scheduler: wlc\n")
	d.waitPlan(t, []string{
		"default/pinned ClusterIP TCP 10.96.0.11:80 mh ->",
		"default/unknown ClusterIP TCP 10.96.0.12:80 wlc ->",
		"default/web ClusterIP TCP 10.96.0.10:80 wlc -> 10.1.0.1:8080 10.1.0.2:8080",
	})
}

func TestDaemonReloadsConfig(t *testing.T) {
	d := startDaemon(t, "")
	d.waitPlan(t, []string{"default/web ClusterIP TCP 10.96.0.10:80 rr -> 10.1.0.1:8080 10.1.0.2:8080"})
	d.waitMetric(t, "switchyard_config_last_reload_successful 1")

	// A good change to a live field is applied.
	d.tc.write(t, "dataplane:\n  mode: dryrun\n  ipvs:\n    scheduler: wlc\n")
	d.waitPlan(t, []string{"default/web ClusterIP TCP 10.96.0.10:80 wlc -> 10.1.0.1:8080 10.1.0.2:8080"})

	// A bad change is rejected, logged, and the last good config stays.
	d.tc.write(t, "dataplane:\n  mode: dryrun\n  ipvs:\n    scheduler: nope\n")
	poll(t, 30*time.Second, func() error {
		if !strings.Contains(d.logs.String(), `config rejected; keeping the last good config`) {
			return fmt.Errorf("no rejection logged")
		}
		return nil
	})
	if logs := d.logs.String(); !strings.Contains(logs, `dataplane.ipvs.scheduler: unknown scheduler \"nope\"`) {
		t.Errorf("rejection does not name the field; logs:\n%s", logs)
	}
	d.waitPlan(t, []string{"default/web ClusterIP TCP 10.96.0.10:80 wlc -> 10.1.0.1:8080 10.1.0.2:8080"})
	d.waitMetric(t, "switchyard_config_last_reload_successful 0")

	// A change that needs a restart is reported, not applied.
	d.tc.write(t, "dataplane:\n  mode: dryrun\n  syncPeriod: 1m\n  ipvs:\n    scheduler: wlc\n")
	poll(t, 30*time.Second, func() error {
		if !strings.Contains(d.logs.String(), `"fields":"dataplane.syncPeriod"`) {
			return fmt.Errorf("restart-only change not logged")
		}
		return nil
	})
	d.waitMetric(t, "switchyard_config_last_reload_successful 1")
}

// waitMetric polls /metrics until it holds the line want.
func (d *daemonUnderTest) waitMetric(t *testing.T, want string) {
	t.Helper()
	poll(t, 30*time.Second, func() error {
		_, body, err := httpGet("http://" + d.tc.metrics + "/metrics")
		if err != nil {
			return err
		}
		if !strings.Contains(body, "\n"+want+"\n") {
			return fmt.Errorf("/metrics lacks %q", want)
		}
		return nil
	})
}

func TestDaemonRefusesUnavailableDataplane(t *testing.T) {
	tc := writeTestConfig(t, "dataplane:\n  mode: ipvs\n")
	w, err := config.NewWatcher(tc.path, checkDataplane)
	if err != nil {
		t.Fatal(err)
	}
	err = runDaemon(t.Context(), daemonConfig{
		Watcher: w, Client: fake.NewClientset(), NodeName: "n", Log: slog.New(slog.DiscardHandler),
	})
	if err == nil || !strings.Contains(err.Error(), "dataplane.mode ipvs") {
		t.Errorf("runDaemon(mode ipvs) = %v, want an error naming dataplane.mode", err)
	}
}

func TestDaemonRefusesBusyPort(t *testing.T) {
	d := startDaemon(t, "")
	d.waitPlan(t, []string{"default/web ClusterIP TCP 10.96.0.10:80 rr -> 10.1.0.1:8080 10.1.0.2:8080"})
	w, err := config.NewWatcher(d.tc.path, checkDataplane)
	if err != nil {
		t.Fatal(err)
	}
	err = runDaemon(t.Context(), daemonConfig{
		Watcher: w, Client: fake.NewClientset(), NodeName: "n", Log: slog.New(slog.DiscardHandler),
	})
	if err == nil || !strings.Contains(err.Error(), "metrics server: listen tcp "+d.tc.metrics) {
		t.Errorf("second daemon on the same ports = %v, want the metrics server's listen error", err)
	}
}

// TestDaemonAllocatesAndReloadsPools runs the daemon with a pool over a
// fake clientset: the allocator takes the Lease and reports the pool,
// and a reload that adds a pool applies it without a restart.
func TestDaemonAllocatesAndReloadsPools(t *testing.T) {
	const pools = "pools:\n  - name: public\n    addresses: [192.0.2.0/28]\n"
	d := startDaemon(t, pools)
	d.waitMetric(t, `switchyard_pool_addresses_total{pool="public"} 16`)
	d.waitMetric(t, `switchyard_pool_addresses_used{pool="public"} 0`)

	d.tc.write(t, pools+"  - name: private\n    addresses: [10.10.0.10-10.10.0.13]\n    autoAssign: false\n")
	d.waitMetric(t, `switchyard_pool_addresses_total{pool="private"} 4`)
	if logs := d.logs.String(); !strings.Contains(logs, `"applied":"pools"`) || strings.Contains(logs, `"fields":"pools"`) {
		t.Errorf("the pools reload was not applied live; logs:\n%s", logs)
	}
}
