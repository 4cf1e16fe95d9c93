//go:build integration

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchyard-lb/switchyard/core/k8s/k8stest"
	"github.com/switchyard-lb/switchyard/test/apitest"
	"github.com/switchyard-lb/switchyard/test/harness"
)

// TestIntegrationDaemon runs the daemon, as main does, against a real API
// server: a Service and its EndpointSlice reach the plan served on
// /debug/state, endpoint changes follow, and SIGTERM-style cancellation
// ends it cleanly.
func TestIntegrationDaemon(t *testing.T) {
	srv := apitest.Start(t)
	ns := srv.Namespace(t)
	ctx := t.Context()
	client := srv.Client

	createNode(t, client, "node-a", "192.168.0.10")

	tc := writeTestConfig(t, "")
	d := startMain(t, srv.Kubeconfig, "node-a", tc, "--v=2")
	defer d.finishUnchecked(t)

	svc := k8stest.Service(ns, "web", "")
	svc.Spec.ClusterIP, svc.Spec.ClusterIPs = "", nil
	svc, err := client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ip := svc.Spec.ClusterIP
	slice, err := client.DiscoveryV1().EndpointSlices(ns).Create(ctx, k8stest.Slice(ns, "web-abc", "web", true, "10.1.0.1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	waitPlan := func(want string) {
		t.Helper()
		poll(t, 60*time.Second, func() error {
			st, err := getState(tc.Metrics)
			if err != nil {
				return err
			}
			for _, got := range vsSummary(st) {
				if got == want {
					return nil
				}
			}
			return fmt.Errorf("plan %q lacks %q", vsSummary(st), want)
		})
	}
	key := ns + "/web ClusterIP TCP " + ip + ":80 rr ->"
	began := time.Now()
	waitPlan(key + " 10.1.0.1:8080")
	t.Logf("Service in the plan %s after creation", time.Since(began).Round(time.Millisecond))

	poll(t, 30*time.Second, func() error {
		code, body, err := httpGet("http://" + tc.Health + "/readyz")
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("/readyz = %d %q %v", code, body, err)
		}
		return nil
	})

	// An endpoint added to the slice reaches the plan.
	slice.Endpoints = append(slice.Endpoints, k8stest.Slice(ns, "web-abc", "web", true, "10.1.0.2").Endpoints...)
	if _, err := client.DiscoveryV1().EndpointSlices(ns).Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	began = time.Now()
	waitPlan(key + " 10.1.0.1:8080 10.1.0.2:8080")
	t.Logf("endpoint change in the plan %s after the update", time.Since(began).Round(time.Millisecond))

	if code, body, err := httpGet("http://" + tc.Metrics + "/metrics"); err != nil || code != 200 ||
		!strings.Contains(body, "switchyard_network_programming_duration_seconds") {
		t.Errorf("/metrics = %d %v, want the network programming histogram", code, err)
	}

	d.Stop(t)
	if !strings.Contains(d.Logs.String(), "shutting down") {
		t.Errorf("no shutdown logged")
	}
}

// TestIntegrationDaemonRefusesInvalidConfig starts the daemon with a bad
// config next to a working API server: it refuses to start, naming the
// field, and serves nothing.
func TestIntegrationDaemonRefusesInvalidConfig(t *testing.T) {
	srv := apitest.Start(t)
	tc := writeTestConfig(t, "dataplane:\n  clusterCIDRs: [10.244.0.0/33]\n  ipvs:\n    scheduler: fastest\n  mode: dryrun\n")
	var stdout, stderr syncBuffer
	err := run(t.Context(), []string{"--config", tc.Path, "--kubeconfig", srv.Kubeconfig, "--hostname-override", "node-a"}, &stdout, &stderr)
	want := `line 10: dataplane.ipvs.scheduler: unknown scheduler "fastest"`
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), `line 8: dataplane.clusterCIDRs[0]: invalid CIDR "10.244.0.0/33"`) {
		t.Fatalf("run = %v, want it to name both fields", err)
	}
	if _, _, err := httpGet("http://" + tc.Metrics + "/metrics"); err == nil {
		t.Error("metrics server answered although the config was refused")
	}

	// The same file with the field fixed starts.
	body, _ := os.ReadFile(tc.Path)
	fixed := strings.NewReplacer("fastest", "rr", "/33", "/16").Replace(string(body))
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(fixed), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--config", path, "--kubeconfig", srv.Kubeconfig, "--hostname-override", "node-a"}, &stdout, &stderr)
	}()
	poll(t, 60*time.Second, func() error {
		code, _, err := httpGet("http://" + tc.Health + "/livez")
		if err != nil || code != 200 {
			return fmt.Errorf("/livez = %d %v", code, err)
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run = %v", err)
	}
}

// TestIntegrationDaemonBinarySIGTERM builds the real binary, runs it
// against the API server until it is ready, and stops it with SIGTERM: it
// exits 0 after a graceful shutdown, and every line it wrote (client-go's
// klog output included) is one JSON log record.
func TestIntegrationDaemonBinarySIGTERM(t *testing.T) {
	srv := apitest.Start(t)
	bin := harness.BuildDaemon(t)
	tc := writeTestConfig(t, "")
	d := harness.Exec(t, "daemon", bin, []string{"NODE_NAME=Node-B"}, "--config", tc.Path, "--kubeconfig", srv.Kubeconfig, "--v=4")
	defer d.LogIfFailed(t)

	harness.WaitReady(t, tc.Health, 60*time.Second)
	st, err := getState(tc.Metrics)
	if err != nil || st.Node != "node-b" {
		t.Errorf("state node = %+v %v, want node-b from NODE_NAME", st, err)
	}

	d.Stop(t) // SIGTERM: exit status 0 within 30 s

	logs := strings.TrimSpace(d.Logs.String())
	var klogLines int
	for _, line := range strings.Split(logs, "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("log line is not JSON: %q", line)
			continue
		}
		if _, ok := rec["reflector"]; ok {
			klogLines++ // client-go's reflectors log through klog
		}
	}
	if klogLines == 0 {
		t.Errorf("no client-go (klog) line reached the JSON log at --v=4")
	}
	if !strings.Contains(logs, `"msg":"shutting down: the dataplane's state is left in place"`) {
		t.Errorf("no graceful shutdown logged")
	}
	t.Logf("%d log lines, %d from klog", strings.Count(logs, "\n")+1, klogLines)
}
