//go:build integration

package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/switchyard-lb/switchyard/core/k8s/k8stest"
	"github.com/switchyard-lb/switchyard/plugins/registry"
	"github.com/switchyard-lb/switchyard/plugins/wasm/wasmtest"
	"github.com/switchyard-lb/switchyard/test/apitest"
	"github.com/switchyard-lb/switchyard/wasm-sdk/walkthrough"
)

// weightState is the part of /debug/state with weights.
type weightState struct {
	Desired []struct {
		Service         string `json:"service"`
		VirtualServices []struct {
			Kind         string `json:"kind"`
			Scheduler    string `json:"scheduler"`
			Destinations []struct {
				Address string `json:"address"`
				Weight  uint32 `json:"weight"`
			} `json:"destinations"`
		} `json:"virtualServices"`
	} `json:"desired"`
}

// weights returns "scheduler addr=weight ..." of the Service's ClusterIP
// virtual service in the daemon's plan.
func weights(metricsAddr, service string) (string, error) {
	return planWeights(metricsAddr, service, func(key string) bool { return strings.HasSuffix(key, "/"+service) })
}

// planWeights returns "scheduler addr=weight ..." of the ClusterIP
// virtual service of the first Service in the daemon's plan whose key
// (namespace/name) match accepts; name is what the error calls it.
func planWeights(metricsAddr, name string, match func(key string) bool) (string, error) {
	code, body, err := httpGet("http://" + metricsAddr + "/debug/state")
	if err != nil || code != 200 {
		return "", fmt.Errorf("/debug/state: %d %v", code, err)
	}
	var st weightState
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		return "", err
	}
	for _, s := range st.Desired {
		for _, vs := range s.VirtualServices {
			if !match(s.Service) || vs.Kind != "ClusterIP" {
				continue
			}
			out := vs.Scheduler
			for _, d := range vs.Destinations {
				out += fmt.Sprintf(" %s=%d", d.Address, d.Weight)
			}
			return out, nil
		}
	}
	return "", fmt.Errorf("%s is not in the plan", name)
}

func gzipBytes(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// startPolicyDaemon runs the daemon of the policy tests as node-a, in
// zone zone-a, with the extra config lines, after creating the policies'
// namespace and the Node. Cleanup stops it.
func startPolicyDaemon(t *testing.T, srv *apitest.Server, extraConfig string) *mainDaemon {
	t.Helper()
	ctx, client := t.Context(), srv.Client
	ensureNamespace(t, client, registry.DefaultNamespace)
	if _, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a", Labels: map[string]string{corev1.LabelTopologyZone: "zone-a"}},
		Status:     corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.0.10"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	d := startMain(t, srv.Kubeconfig, "node-a", writeTestConfig(t, extraConfig), "--v=2")
	t.Cleanup(func() { d.finishUnchecked(t) })
	return d
}

// zoneAwareModule is the Go SDK's zone-aware example, built (cached).
func zoneAwareModule(t *testing.T) []byte {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	module, err := wasmtest.BuildGo(root, filepath.Join(root, "wasm-sdk/go/examples/zoneaware"), filepath.Join(root, "wasm-sdk/go/policy"))
	if err != nil {
		t.Fatal(err)
	}
	return module
}

// createZonedService creates the Service name in ns on policy, with two
// endpoints: 10.1.0.1 on node-a in zone-a, 10.1.0.2 on node-b in zone-b,
// in the EndpointSlice it returns.
func createZonedService(t *testing.T, client kubernetes.Interface, ns, name, policy string) *discoveryv1.EndpointSlice {
	t.Helper()
	ctx := t.Context()
	svc := k8stest.Service(ns, name, "")
	svc.Spec.ClusterIP, svc.Spec.ClusterIPs = "", nil
	svc.Annotations = map[string]string{"switchyard.dev/policy": policy}
	if _, err := client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	zoneA, zoneB := "zone-a", "zone-b"
	slice := k8stest.Slice(ns, name+"-abc", name, true, "10.1.0.1", "10.1.0.2")
	slice.Endpoints[0].Zone, slice.Endpoints[0].NodeName = &zoneA, k8stest.Ptr("node-a")
	slice.Endpoints[1].Zone, slice.Endpoints[1].NodeName = &zoneB, k8stest.Ptr("node-b")
	slice, err := client.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return slice
}

// TestIntegrationPolicies runs the daemon against a real API server with
// the SDK's zone-aware policy delivered as a ConfigMap: creating,
// updating, and deleting the ConfigMap and switching a Service's
// annotation change the plan's weights; a garbage module gives PolicyFailed
// Events and a False PolicyReady condition while the Service keeps its
// last good weights and another Service is untouched.
func TestIntegrationPolicies(t *testing.T) {
	module := zoneAwareModule(t)
	srv := apitest.Start(t)
	ns := srv.Namespace(t)
	ctx := t.Context()
	client := srv.Client
	tc := startPolicyDaemon(t, srv, "policies:\n  statisticsInterval: 1h\n").tc

	// web uses policy "zone"; other uses builtin:local-first throughout.
	createZonedService(t, client, ns, "web", "zone")
	createZonedService(t, client, ns, "other", "builtin:local-first")
	const otherWant = "rr 10.1.0.1:8080=1 10.1.0.2:8080=0"
	waitWeights := func(step, service, want string) {
		t.Helper()
		began := time.Now()
		poll(t, 60*time.Second, func() error {
			got, err := weights(tc.Metrics, service)
			if err != nil {
				return fmt.Errorf("%s: %w", step, err)
			}
			if got != want {
				return fmt.Errorf("%s: %s weights %q, want %q", step, service, got, want)
			}
			return nil
		})
		t.Logf("%s: %s is %q after %s", step, service, want, time.Since(began).Round(time.Millisecond))
		if got, err := weights(tc.Metrics, "other"); err != nil || got != otherWant {
			t.Errorf("%s: other's weights %q %v, want %q untouched", step, got, err, otherWant)
		}
	}
	waitEvent := func(step, reason, contains string) {
		t.Helper()
		poll(t, 60*time.Second, func() error {
			evs, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("reason", reason).String()})
			if err != nil {
				return err
			}
			for _, e := range evs.Items {
				if e.InvolvedObject.Name == "other" {
					t.Errorf("%s: %s Event on other: %s", step, reason, e.Message)
				}
				if e.InvolvedObject.Name == "web" && strings.Contains(e.Message, contains) {
					return nil
				}
			}
			return fmt.Errorf("%s: no %s Event on web with %q among %d", step, reason, contains, len(evs.Items))
		})
	}

	// 1. The ConfigMap does not exist yet: uniform weights, and the user is told.
	waitWeights("no ConfigMap", "web", "rr 10.1.0.1:8080=1 10.1.0.2:8080=1")
	waitEvent("no ConfigMap", "PolicyFailed", "policy not found")
	waitCondition(t, client, ns, "web", "no ConfigMap", metav1.ConditionFalse, "LoadFailed")

	// 2. Created (gzip, pinned): zone-aware weights.
	cms := client.CoreV1().ConfigMaps(registry.DefaultNamespace)
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "zone", Labels: map[string]string{registry.Label: "true"}},
		BinaryData: map[string][]byte{registry.KeyModuleGzip: gzipBytes(t, module)},
		Data:       map[string]string{registry.KeyPin: registry.Digest(module)},
	}
	cm, err := cms.Create(ctx, cm, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitWeights("created", "web", "wrr 10.1.0.1:8080=100 10.1.0.2:8080=0")
	waitCondition(t, client, ns, "web", "created", metav1.ConditionTrue, "Evaluated")

	// 3. Updated parameters.
	cm.Data[registry.KeyParams] = `{"localWeight": 7}`
	if cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitWeights("params updated", "web", "wrr 10.1.0.1:8080=7 10.1.0.2:8080=0")

	// 4. The Service's own parameters override the ConfigMap's.
	setAnnotations := func(ann map[string]string) {
		t.Helper()
		// The daemon writes the Service's status meanwhile.
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			svc, err := client.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return err
			}
			svc.Annotations = ann
			_, err = client.CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	setAnnotations(map[string]string{"switchyard.dev/policy": "zone", "switchyard.dev/policy-params": `{"localWeight": 9}`})
	waitWeights("Service params", "web", "wrr 10.1.0.1:8080=9 10.1.0.2:8080=0")

	// 5. Switching the annotation to a builtin and back.
	setAnnotations(map[string]string{"switchyard.dev/policy": "builtin:uniform"})
	waitWeights("switched to builtin:uniform", "web", "rr 10.1.0.1:8080=1 10.1.0.2:8080=1")
	setAnnotations(map[string]string{"switchyard.dev/policy": "zone"})
	waitWeights("switched back", "web", "wrr 10.1.0.1:8080=7 10.1.0.2:8080=0")

	// 6. A hostile module (garbage bytes): PolicyFailed, and web keeps
	// running the last good version; other is untouched (checked by
	// waitWeights).
	cm.BinaryData = map[string][]byte{registry.KeyModule: []byte("garbage, not a module")}
	cm.Data = map[string]string{registry.KeyParams: `{"localWeight": 7}`}
	if cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitEvent("garbage", "PolicyFailed", "invalid policy module")
	waitEvent("garbage", "PolicyFallback", "the last good version of the policy, sha256 "+registry.ShortDigest(registry.Digest(module)))
	waitCondition(t, client, ns, "web", "garbage", metav1.ConditionFalse, "LoadFailed")
	waitWeights("garbage", "web", "wrr 10.1.0.1:8080=7 10.1.0.2:8080=0")

	// 7. A module that does not match its pin is refused too.
	cm.BinaryData = map[string][]byte{registry.KeyModuleGzip: gzipBytes(t, module)}
	cm.Data = map[string]string{registry.KeyPin: registry.Digest([]byte("another module"))}
	if cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitEvent("pin mismatch", "PolicyFailed", "digest differs from its sha256 pin")

	// 8. Fixed, then deleted: back to the policy, then uniform.
	cm.Data = map[string]string{registry.KeyParams: `{"localWeight": 5}`}
	if _, err = cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitWeights("fixed", "web", "wrr 10.1.0.1:8080=5 10.1.0.2:8080=0")
	waitCondition(t, client, ns, "web", "fixed", metav1.ConditionTrue, "Evaluated")
	if err := cms.Delete(ctx, "zone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitWeights("deleted", "web", "rr 10.1.0.1:8080=1 10.1.0.2:8080=1")
	waitCondition(t, client, ns, "web", "deleted", metav1.ConditionFalse, "LoadFailed")

	code, body, err := httpGet("http://" + tc.Metrics + "/metrics")
	if err != nil || code != 200 {
		t.Fatalf("/metrics: %d %v", code, err)
	}
	for _, want := range []string{
		`switchyard_policy_evaluations_total{policy="zone",result="success"}`,
		`switchyard_policy_failures_total{policy="zone",reason="load"}`,
		`switchyard_policy_evaluation_duration_seconds_count{policy="zone"}`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestIntegrationPolicyLastGoodAcrossRestart: a daemon restarted while
// its Service's policy ConfigMap is broken keeps balancing with the last
// good version it kept in policies.cacheDir, and says so on the Service;
// without it, the Service would fall back to uniform weights.
func TestIntegrationPolicyLastGoodAcrossRestart(t *testing.T) {
	module := zoneAwareModule(t)
	srv := apitest.Start(t)
	ns := srv.Namespace(t)
	ctx, client := t.Context(), srv.Client
	first := startPolicyDaemon(t, srv, "policies:\n  statisticsInterval: 1h\n  cacheDir: "+t.TempDir()+"\n")
	tc := first.tc

	createZonedService(t, client, ns, "web", "zone")
	cms := client.CoreV1().ConfigMaps(registry.DefaultNamespace)
	cm, err := cms.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "zone", Labels: map[string]string{registry.Label: "true"}},
		BinaryData: map[string][]byte{registry.KeyModuleGzip: gzipBytes(t, module)},
		Data:       map[string]string{registry.KeyPin: registry.Digest(module), registry.KeyParams: `{"localWeight": 7}`},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	good := cm.ResourceVersion
	const zoneAware = "wrr 10.1.0.1:8080=7 10.1.0.2:8080=0"
	waitWeights := func(step string) {
		t.Helper()
		poll(t, 2*time.Minute, func() error {
			got, err := weights(tc.Metrics, "web")
			if err != nil {
				return fmt.Errorf("%s: %w", step, err)
			}
			if got != zoneAware {
				return fmt.Errorf("%s: web's weights %q, want %q", step, got, zoneAware)
			}
			return nil
		})
	}
	waitWeights("loaded")
	first.finishUnchecked(t)

	// Broken while no daemon runs.
	cm.BinaryData = map[string][]byte{registry.KeyModule: []byte("garbage, not a module")}
	cm.Data = map[string]string{registry.KeyParams: `{"localWeight": 9}`}
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	second := startMain(t, srv.Kubeconfig, "node-a", tc, "--v=2")
	t.Cleanup(func() { second.finishUnchecked(t) })
	waitWeights("restarted on a broken ConfigMap")
	wantMsg := "kept on this node's disk from revision " + good
	poll(t, 2*time.Minute, func() error {
		svc, err := client.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		i := slices.IndexFunc(svc.Status.Conditions, func(c metav1.Condition) bool { return c.Type == registry.ConditionPolicyReady })
		if i < 0 || svc.Status.Conditions[i].Reason != "LoadFailed" || !strings.Contains(svc.Status.Conditions[i].Message, wantMsg) {
			return fmt.Errorf("web's conditions %+v, want %s LoadFailed saying %q", svc.Status.Conditions, registry.ConditionPolicyReady, wantMsg)
		}
		return nil
	})
}

// TestIntegrationPolicyWalkthrough follows "From an empty directory, per
// language" of wasm-sdk/README.md in Go, Rust and AssemblyScript, with
// the files the page shows (walkthrough.Setup): a new policy with a list
// parameter in an empty directory; `yardctl policy build` detecting the
// language and keeping function names; `yardctl policy test` passing the page's scenarios, and
// failing with the difference named when an expectation is wrong;
// `yardctl policy pack` into a file, `kubectl apply --server-side -f` of
// it (a Go module is too big for a client-side apply) to a real
// API server and `kubectl annotate` of a Service; then a running daemon
// (dry-run dataplane) balances the Service with the policy's weights, its
// parameter excluding a zone, and `yardctl state` shows the module packed
// and the ConfigMap's resourceVersion. A language whose toolchain is
// missing is skipped, except under make test-integration.
func TestIntegrationPolicyWalkthrough(t *testing.T) {
	lab := startPolicyLab(t)
	root, work, yardctl, srv, tc := lab.root, lab.work, lab.yardctl, lab.srv, lab.daemon
	ctx, client := t.Context(), srv.Client

	for _, lang := range walkthrough.Languages {
		t.Run(lang, func(t *testing.T) {
			t.Parallel()
			if lang != walkthrough.Go {
				_, err := toolchain(root, lang)
				skipWithoutToolchain(t, err)
			}
			// yardctlDo runs yardctl, failing the test when it fails.
			yardctlDo := func(args ...string) string {
				t.Helper()
				out, errOut, err := runYardctl(ctx, yardctl, "", args...)
				if err != nil {
					t.Fatalf("yardctl %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
				}
				return out
			}

			// An empty directory, the page's files, the build.
			dir := filepath.Join(work, lang, "mypolicy")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			layout, err := walkthrough.Setup(ctx, root, dir, lang)
			if err != nil {
				t.Fatal(err)
			}
			module, scenarios := filepath.Join(dir, "policy.wasm"), filepath.Join(dir, "scenarios")
			began := time.Now()
			out := yardctlDo(append([]string{"policy", "build"}, layout.Build...)...)
			if !strings.HasPrefix(out, module+": ") || !strings.HasSuffix(out, " bytes ("+lang+")\n") {
				t.Errorf("yardctl policy build printed %q, want %s, its size and the language detected (%s)", out, module, lang)
			}
			t.Logf("built in %s: %s", time.Since(began).Round(time.Millisecond), strings.TrimSpace(out))
			m, err := os.ReadFile(module)
			if err != nil {
				t.Fatal(err)
			}
			if sections := wasmtest.CustomSections(m); !slices.Contains(sections, "name") {
				t.Errorf("the module has the custom sections %q, no name section: a trap's stack trace would not name the functions", sections)
			}

			// The page's scenarios pass.
			out = yardctlDo("policy", "test", module, "--scenario", scenarios, "--deadline", "10s")
			passed := 0
			for _, line := range strings.Split(out, "\n") {
				if f := strings.Fields(line); len(f) > 1 && strings.HasSuffix(f[0], ".yaml") && f[1] == "pass" {
					passed++
				}
			}
			if passed != 2 {
				t.Errorf("yardctl policy test: %d scenarios pass, want the page's 2:\n%s", passed, out)
			}

			// A wrong expectation fails, naming the difference.
			wrong := filepath.Join(dir, "wrong")
			spread, err := os.ReadFile(filepath.Join(scenarios, "spread.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			bad := strings.Replace(string(spread), "weights: [1000, 100, 0]", "weights: [1000, 100, 7]", 1)
			if bad == string(spread) {
				t.Fatalf("the page's spread.yaml no longer expects weights [1000, 100, 0]:\n%s", spread)
			}
			if err := os.MkdirAll(wrong, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(wrong, "spread.yaml"), []byte(bad), 0o644); err != nil {
				t.Fatal(err)
			}
			out, errOut, err := runYardctl(ctx, yardctl, "", "policy", "test", module, "--scenario", wrong, "--deadline", "10s")
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 ||
				!strings.Contains(out, "10.0.2.1:8080 (node-c, zone-c): weight 0, want 7") ||
				!strings.Contains(errOut, "1 of 1 scenarios failed their expectations") {
				t.Errorf("yardctl policy test with a wrong expectation: %v, stdout:\n%s\nstderr:\n%s\nwant exit status 1 and the weight that differs", err, out, errOut)
			}

			// Packed into a file, applied with kubectl, the Service annotated.
			name := "least-zone-" + lang
			out = yardctlDo("policy", "pack", module, "--name", name, "--params", `{"excludeZones": ["zone-c"]}`, "--scenario", scenarios, "--deadline", "10s")
			manifest := filepath.Join(dir, name+".yaml")
			if err := os.WriteFile(manifest, []byte(out), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := srv.Kubectl(t, "apply", "--server-side", "-f", manifest); err != nil {
				t.Fatal(err)
			}
			digest := registry.Digest(m)
			cm, err := client.CoreV1().ConfigMaps(registry.DefaultNamespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if cm.Data[registry.KeyPin] != digest {
				t.Errorf("the ConfigMap pins %q, want the module built, %s", cm.Data[registry.KeyPin], digest)
			}

			ns := srv.Namespace(t)
			svc := k8stest.Service(ns, "web", "")
			svc.Spec.ClusterIP, svc.Spec.ClusterIPs = "", nil
			if _, err := client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			slice := k8stest.Slice(ns, "web-abc", "web", true, "10.1.0.1", "10.1.0.2", "10.1.0.3")
			for i, zone := range []string{"zone-a", "zone-b", "zone-c"} {
				slice.Endpoints[i].Zone, slice.Endpoints[i].NodeName = k8stest.Ptr(zone), k8stest.Ptr("node-"+zone[len("zone-"):])
			}
			if _, err := client.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := srv.Kubectl(t, "annotate", "-n", ns, "service", "web", "switchyard.dev/policy="+name); err != nil {
				t.Fatal(err)
			}

			// The daemon runs it.
			key := ns + "/web"
			began = time.Now()
			want := "wrr 10.1.0.1:8080=1000 10.1.0.2:8080=1000 10.1.0.3:8080=0"
			poll(t, 2*time.Minute, func() error {
				got, err := weightsOf(tc.Metrics, key)
				if err != nil {
					return err
				}
				if got != want {
					return errors.New("weights " + got + ", want " + want)
				}
				return nil
			})
			t.Logf("the daemon's weights %q after %s", want, time.Since(began).Round(time.Millisecond))
			waitPolicyState(t, yardctl, tc.Metrics, "walkthrough", key, digest, cm.ResourceVersion, true, "evaluated")
		})
	}
}
