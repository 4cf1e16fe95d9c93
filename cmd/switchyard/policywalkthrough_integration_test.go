//go:build integration

package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchyard-lb/switchyard/core/k8s/k8stest"
	"github.com/switchyard-lb/switchyard/plugins/registry"
	"github.com/switchyard-lb/switchyard/plugins/wasm/wasmtest"
	"github.com/switchyard-lb/switchyard/wasm-sdk/walkthrough"
)

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
