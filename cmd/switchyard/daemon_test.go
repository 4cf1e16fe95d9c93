package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/switchyard-lb/switchyard/core/config"
	"github.com/switchyard-lb/switchyard/core/k8s/k8stest"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/ipvs/dryrun"
	"github.com/switchyard-lb/switchyard/ipvs/ipvstest"
)

// daemonUnderTest runs runDaemon against a fake clientset.
type daemonUnderTest struct {
	*daemonProc
	tc     *testConfig
	dp     *dryrun.Dataplane
	client *fake.Clientset
}

func startDaemon(t *testing.T, extraConfig string) *daemonUnderTest {
	t.Helper()
	dp := dryrun.New()
	d := startDaemonWith(t, extraConfig, func(*config.Config, *slog.Logger) (plugin.Dataplane, error) { return dp, nil })
	d.dp = dp
	return d
}

// startDaemonWith is startDaemon with the dataplane newDP returns (dp
// stays nil).
func startDaemonWith(t *testing.T, extraConfig string, newDP func(*config.Config, *slog.Logger) (plugin.Dataplane, error)) *daemonUnderTest {
	t.Helper()
	d := &daemonUnderTest{tc: writeTestConfig(t, extraConfig)}
	w, err := config.NewWatcher(d.tc.Path, configChecks()...)
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}},
		k8stest.Service("default", "web", "10.96.0.10"),
		k8stest.Slice("default", "web-abc", "web", true, "10.1.0.1", "10.1.0.2"),
	)
	d.client = client
	logs := &syncBuffer{}
	d.daemonProc = goDaemon(t.Context(), "daemon", logs, func(ctx context.Context) error {
		return runDaemon(ctx, daemonConfig{
			Watcher:            w,
			Client:             client,
			NodeName:           "node-a",
			Log:                slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			NewDataplane:       newDP,
			ConfigPollInterval: 10 * time.Millisecond,
		})
	})
	t.Cleanup(func() {
		d.Halt()
		d.LogIfFailed(t)
	})
	return d
}

// waitPlan polls /debug/state until its virtual services are want.
func (d *daemonUnderTest) waitPlan(t *testing.T, want []string) {
	t.Helper()
	poll(t, 30*time.Second, func() error {
		st, err := getState(d.tc.Metrics)
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
		code, body, err := httpGet("http://" + d.tc.Health + "/readyz")
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
		{"/livez", d.tc.Health, 200, "ok"},
		{"/healthz", d.tc.Health, 200, `"lastUpdated": "2`},
		{"/metrics", d.tc.Metrics, 200, "switchyard_sync_duration_seconds_count"},
		{"/metrics", d.tc.Metrics, 200, "go_goroutines"},
		{"/debug/state", d.tc.Metrics, 200, `"node": "node-a"`},
		{"/readyz", d.tc.Metrics, 404, ""},
	}
	for _, c := range checks {
		code, body, err := httpGet("http://" + c.addr + c.path)
		if err != nil || code != c.wantCode || !strings.Contains(body, c.wantBody) {
			t.Errorf("GET %s = %d %v, want %d with %q; body:\n%.500s", c.path, code, err, c.wantCode, c.wantBody, body)
		}
	}

	d.Stop(t)
	// Shutting down leaves the dataplane's table as it was.
	if got := d.dp.String(); !strings.Contains(got, "10.96.0.10:80") {
		t.Errorf("dataplane table after shutdown lost the service:\n%s", got)
	}
	if _, _, err := httpGet("http://" + d.tc.Health + "/livez"); err == nil {
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
		svc := k8stest.Service("default", s.name, s.ip)
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
	d.tc.Write(t, "dataplane:\n  mode: dryrun\n  ipvs:\n    scheduler: wlc\n")
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
	d.tc.Write(t, "dataplane:\n  mode: dryrun\n  ipvs:\n    scheduler: wlc\n")
	d.waitPlan(t, []string{"default/web ClusterIP TCP 10.96.0.10:80 wlc -> 10.1.0.1:8080 10.1.0.2:8080"})

	// A bad change is rejected, logged, and the last good config stays.
	d.tc.Write(t, "dataplane:\n  mode: dryrun\n  ipvs:\n    scheduler: nope\n")
	poll(t, 30*time.Second, func() error {
		if !strings.Contains(d.Logs.String(), `config rejected; keeping the last good config`) {
			return fmt.Errorf("no rejection logged")
		}
		return nil
	})
	if logs := d.Logs.String(); !strings.Contains(logs, `dataplane.ipvs.scheduler: unknown scheduler \"nope\"`) {
		t.Errorf("rejection does not name the field; logs:\n%s", logs)
	}
	d.waitPlan(t, []string{"default/web ClusterIP TCP 10.96.0.10:80 wlc -> 10.1.0.1:8080 10.1.0.2:8080"})
	d.waitMetric(t, "switchyard_config_last_reload_successful 0")

	// A change that needs a restart is reported, not applied.
	d.tc.Write(t, "dataplane:\n  mode: dryrun\n  syncPeriod: 1m\n  ipvs:\n    scheduler: wlc\n")
	poll(t, 30*time.Second, func() error {
		if !strings.Contains(d.Logs.String(), `"fields":"dataplane.syncPeriod"`) {
			return fmt.Errorf("restart-only change not logged")
		}
		return nil
	})
	d.waitMetric(t, "switchyard_config_last_reload_successful 1")
}

// TestDaemonWarnsV1alpha1Config: a v1alpha1 config file is read and
// converted, with one deprecation warning each time the daemon reads
// one, at start and on reload; a v1alpha2 file gets none.
func TestDaemonWarnsV1alpha1Config(t *testing.T) {
	const v1alpha1 = "apiVersion: switchyard.dev/v1alpha1\n"
	d := startDaemon(t, v1alpha1+"dataplane:\n  mode: dryrun\n  ipvs:\n    scheduler: rr\n    syncPeriod: 40s\n")
	d.waitPlan(t, []string{"default/web ClusterIP TCP 10.96.0.10:80 rr -> 10.1.0.1:8080 10.1.0.2:8080"})
	warnings := func() int { return strings.Count(d.Logs.String(), `"msg":"config file in a deprecated format"`) }
	if n := warnings(); n != 1 {
		t.Errorf("at start: %d deprecation warnings, want 1; logs:\n%s", n, d.Logs.String())
	}
	if !strings.Contains(d.Logs.String(), "move dataplane.ipvs.syncPeriod, minSyncPeriod") {
		t.Errorf("the warning does not say what to move; logs:\n%s", d.Logs.String())
	}

	// A reload of another v1alpha1 file: one more warning, and it applies.
	d.tc.Write(t, v1alpha1+"dataplane:\n  mode: dryrun\n  ipvs:\n    scheduler: wlc\n    syncPeriod: 40s\n")
	d.waitPlan(t, []string{"default/web ClusterIP TCP 10.96.0.10:80 wlc -> 10.1.0.1:8080 10.1.0.2:8080"})
	if n := warnings(); n != 2 {
		t.Errorf("after a v1alpha1 reload: %d deprecation warnings, want 2", n)
	}

	// The same settings in v1alpha2: no warning.
	d.tc.Write(t, "dataplane:\n  mode: dryrun\n  syncPeriod: 40s\n  ipvs:\n    scheduler: lc\n")
	d.waitPlan(t, []string{"default/web ClusterIP TCP 10.96.0.10:80 lc -> 10.1.0.1:8080 10.1.0.2:8080"})
	if n := warnings(); n != 2 {
		t.Errorf("after a v1alpha2 reload: %d deprecation warnings, want still 2", n)
	}
}

// waitMetric polls /metrics until it holds the line want.
func (d *daemonUnderTest) waitMetric(t *testing.T, want string) {
	t.Helper()
	poll(t, 30*time.Second, func() error {
		_, body, err := httpGet("http://" + d.tc.Metrics + "/metrics")
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
	w, err := config.NewWatcher(tc.Path, configChecks()...)
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
	w, err := config.NewWatcher(d.tc.Path, configChecks()...)
	if err != nil {
		t.Fatal(err)
	}
	err = runDaemon(t.Context(), daemonConfig{
		Watcher: w, Client: fake.NewClientset(), NodeName: "n", Log: slog.New(slog.DiscardHandler),
	})
	if err == nil || !strings.Contains(err.Error(), "metrics server: listen tcp "+d.tc.Metrics) {
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

	d.tc.Write(t, pools+"  - name: private\n    addresses: [10.10.0.10-10.10.0.13]\n    autoAssign: false\n")
	d.waitMetric(t, `switchyard_pool_addresses_total{pool="private"} 4`)
	if logs := d.Logs.String(); !strings.Contains(logs, `"applied":"pools"`) || strings.Contains(logs, `"fields":"pools"`) {
		t.Errorf("the pools reload was not applied live; logs:\n%s", logs)
	}
}

// waitHealthz polls /healthz until it answers code with nodeEligible as
// wanted, and checks that /livez answers 200 meanwhile.
func waitHealthz(t *testing.T, healthAddr string, code int, eligible bool) {
	t.Helper()
	poll(t, 60*time.Second, func() error {
		got, body, err := httpGet("http://" + healthAddr + "/healthz")
		if err != nil {
			return err
		}
		if want := fmt.Sprintf(`"nodeEligible": %v`, eligible); got != code || !strings.Contains(body, want) {
			return fmt.Errorf("/healthz = %d %s, want %d with %s", got, body, code, want)
		}
		return nil
	})
	if got, body, err := httpGet("http://" + healthAddr + "/livez"); err != nil || got != http.StatusOK {
		t.Errorf("/livez = %d %q %v, want 200 whatever the Node", got, body, err)
	}
}

// TestDaemonHealthzWhileNodeIsDeleted: the cluster autoscaler's taint on
// this node's Node fails /healthz (KEP-3836) and its removal restores it;
// another Node's taint does not matter.
func TestDaemonHealthzWhileNodeIsDeleted(t *testing.T) {
	d := startDaemon(t, "")
	d.waitPlan(t, []string{"default/web ClusterIP TCP 10.96.0.10:80 rr -> 10.1.0.1:8080 10.1.0.2:8080"})
	waitHealthz(t, d.tc.Health, http.StatusOK, true)

	setTaints := func(name string, taints ...corev1.Taint) {
		t.Helper()
		n, err := d.client.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Spec.Taints = taints
		if _, err := d.client.CoreV1().Nodes().Update(t.Context(), n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	toBeDeleted := corev1.Taint{Key: "ToBeDeletedByClusterAutoscaler", Value: "1764633600", Effect: corev1.TaintEffectNoSchedule}
	if _, err := d.client.CoreV1().Nodes().Create(t.Context(),
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{toBeDeleted}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	setTaints("node-a", corev1.Taint{Key: "example.com/other", Effect: corev1.TaintEffectNoSchedule})
	// The daemon has seen both changes once a sync after them is done:
	// a Service created after them shows in the plan.
	if _, err := d.client.CoreV1().Services("default").Create(t.Context(), k8stest.Service("default", "api", "10.96.0.11"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	d.waitPlan(t, []string{
		"default/api ClusterIP TCP 10.96.0.11:80 rr ->",
		"default/web ClusterIP TCP 10.96.0.10:80 rr -> 10.1.0.1:8080 10.1.0.2:8080",
	})
	waitHealthz(t, d.tc.Health, http.StatusOK, true)

	setTaints("node-a", toBeDeleted)
	waitHealthz(t, d.tc.Health, http.StatusServiceUnavailable, false)
	setTaints("node-a")
	waitHealthz(t, d.tc.Health, http.StatusOK, true)
}

// TestDaemonLogsAndCountsDataplaneErrors runs the daemon on the IPVS
// dataplane over the ipvstest fakes with the kernel refusing new virtual
// services: each failed sync is logged with its error and counted in
// switchyard_sync_errors_total{stage="dataplane"}, /debug/state names the
// error, and once the kernel accepts again the retry programs the table.
// The dataplane's own messages reach the daemon's log too.
func TestDaemonLogsAndCountsDataplaneErrors(t *testing.T) {
	kernel := ipvstest.NewFake()
	kernel.SetError(ipvstest.OpAddService, errors.New("injected: cannot allocate memory"))
	d := startDaemonWith(t, "", func(_ *config.Config, log *slog.Logger) (plugin.Dataplane, error) {
		return ipvs.New(ipvs.Config{
			Kernel: kernel, Addresses: ipvstest.NewFakeAddresses(), StrictARP: true, Log: log,
			Sysctls: ipvstest.NewFakeSysctls(map[string]string{
				"net/ipv4/ip_forward": "0", "net/ipv4/vs/conntrack": "0",
				"net/ipv4/vs/expire_nodest_conn": "0", "net/ipv4/vs/expire_quiescent_template": "0",
				"net/ipv4/vs/conn_reuse_mode":  "1",
				"net/ipv4/conf/all/arp_ignore": "0", "net/ipv4/conf/all/arp_announce": "0",
			}),
		})
	})

	// Two failed syncs at least: a failure keeps being reported.
	var failures int
	poll(t, 60*time.Second, func() error {
		failures = 0
		for _, line := range strings.Split(d.Logs.String(), "\n") {
			if strings.Contains(line, `"msg":"sync failed"`) && strings.Contains(line, `"stage":"dataplane"`) &&
				strings.Contains(line, `"level":"ERROR"`) && strings.Contains(line, "injected: cannot allocate memory") {
				failures++
			}
		}
		if failures < 2 {
			return fmt.Errorf("%d failed syncs logged with the error, want 2 or more", failures)
		}
		return nil
	})
	counted := func() (float64, error) {
		_, body, err := httpGet("http://" + d.tc.Metrics + "/metrics")
		if err != nil {
			return 0, err
		}
		for _, line := range strings.Split(body, "\n") {
			if v, ok := strings.CutPrefix(line, `switchyard_sync_errors_total{stage="dataplane"} `); ok {
				return strconv.ParseFloat(v, 64)
			}
		}
		return 0, fmt.Errorf("no switchyard_sync_errors_total{stage=\"dataplane\"} in /metrics:\n%s", body)
	}
	poll(t, 60*time.Second, func() error {
		n, err := counted()
		if err == nil && n < float64(failures) {
			err = fmt.Errorf("sync_errors_total{stage=dataplane} = %v, want at least the %d failures logged", n, failures)
		}
		return err
	})
	if st, err := getState(d.tc.Metrics); err != nil || !strings.Contains(st.LastError, "injected: cannot allocate memory") {
		t.Errorf("/debug/state lastError = %+v, %v; want the dataplane's error", st, err)
	}
	if !strings.Contains(d.Logs.String(), `"component":"dataplane"`) {
		t.Errorf("the dataplane's own messages are not in the daemon's log:\n%s", d.Logs.String())
	}

	kernel.SetError(ipvstest.OpAddService, nil)
	poll(t, 60*time.Second, func() error {
		st, err := getState(d.tc.Metrics)
		if err != nil {
			return err
		}
		if st.LastError != "" || len(kernel.Table()) == 0 {
			return fmt.Errorf("after the kernel recovered: lastError %q, %d virtual services in the kernel", st.LastError, len(kernel.Table()))
		}
		return nil
	})
	before, err := counted()
	if err != nil {
		t.Fatal(err)
	}
	// A sync without error counts nothing more.
	if _, err := d.client.CoreV1().Services("default").Create(t.Context(), k8stest.Service("default", "api", "10.96.0.11"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, 60*time.Second, func() error {
		for _, e := range kernel.Table() {
			if e.Service.Addr == netip.MustParseAddr("10.96.0.11") {
				return nil
			}
		}
		return errors.New("default/api not in the kernel yet")
	})
	if after, err := counted(); err != nil || after != before {
		t.Errorf("sync_errors_total{stage=dataplane} went from %v to %v (%v) over a good sync", before, after, err)
	}
}
