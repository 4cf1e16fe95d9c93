//go:build integration

package main

import (
	"bytes"
	"context"
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

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/switchyard-lb/switchyard/core/policystage"
	"github.com/switchyard-lb/switchyard/core/reconcile"
	"github.com/switchyard-lb/switchyard/plugins/registry"
	"github.com/switchyard-lb/switchyard/plugins/wasm/wasmtest"
	"github.com/switchyard-lb/switchyard/test/apitest"
)

// buildYardctl builds cmd/yardctl into dir and returns its path.
func buildYardctl(root, dir string) (string, error) {
	bin := filepath.Join(dir, "yardctl")
	cmd := exec.Command(wasmtest.GoTool(), "build", "-o", bin, "./cmd/yardctl")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build yardctl: %w\n%s", err, out)
	}
	return bin, nil
}

// sdkModule returns the SDK example example built from language lang's
// source, or why it cannot: a module make built ($SWITCHYARD_WASM_DIR or
// bin/wasm, as make wasm-sdk-examples writes them), else a build with
// `yardctl policy build` when the language's toolchain is installed,
// cached by its sources.
func sdkModule(root, yardctl, lang, example string) ([]byte, error) {
	if lang == "go" {
		return wasmtest.BuildGo(root, filepath.Join(root, "wasm-sdk/go/examples", example), filepath.Join(root, "wasm-sdk/go/policy"))
	}
	for _, dir := range []string{os.Getenv("SWITCHYARD_WASM_DIR"), filepath.Join(root, "bin", "wasm")} {
		if dir == "" {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(dir, lang, example+".wasm")); err == nil {
			return b, nil
		}
	}
	tool, err := toolchain(root, lang)
	if err != nil {
		return nil, err
	}
	src, sdk := filepath.Join(root, "wasm-sdk/rust/examples", example+".rs"), filepath.Join(root, "wasm-sdk/rust/policy")
	if lang == "assemblyscript" {
		src, sdk = filepath.Join(root, "wasm-sdk/assemblyscript/examples", example+".ts"), filepath.Join(root, "wasm-sdk/assemblyscript/sdk")
	}
	version, _ := exec.Command(tool, "--version").Output()
	return wasmtest.Cached(lang+"-"+example, string(version), []string{src, sdk}, func(out string) error {
		cmd := exec.Command(yardctl, "policy", "build", src, "--out", out)
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("yardctl policy build %s: %w\n%s", src, err, b)
		}
		return nil
	})
}

var errNoToolchain = errors.New("toolchain not installed")

// toolchain returns the compiler `yardctl policy build` runs for lang
// (rust or assemblyscript) in the checkout at root, or an error wrapping
// errNoToolchain that says what to install.
func toolchain(root, lang string) (string, error) {
	switch lang {
	case "rust":
		tool := os.Getenv("RUSTC")
		if tool == "" {
			tool = "/usr/bin/rustc"
		}
		sysroot, err := exec.Command(tool, "--print", "sysroot").Output()
		if err != nil {
			return "", fmt.Errorf("%w: no rustc (%s: %v; Debian's rustc and libstd-rust-dev-wasm32, or make wasm-sdk-examples)", errNoToolchain, tool, err)
		}
		if _, err := os.Stat(filepath.Join(strings.TrimSpace(string(sysroot)), "lib/rustlib/wasm32-unknown-unknown")); err != nil {
			return "", fmt.Errorf("%w: %s has no wasm32 standard library (libstd-rust-dev-wasm32)", errNoToolchain, tool)
		}
		return tool, nil
	case "assemblyscript":
		tool := os.Getenv("ASC")
		if tool == "" {
			tool = filepath.Join(root, "wasm-sdk/assemblyscript/node_modules/.bin/asc")
		}
		if _, err := os.Stat(tool); err != nil {
			return "", fmt.Errorf("%w: no AssemblyScript compiler (%v; make wasm-sdk-examples installs it)", errNoToolchain, err)
		}
		return tool, nil
	}
	return "", fmt.Errorf("no toolchain for %s", lang)
}

// skipWithoutToolchain skips the test when err says a toolchain is
// missing (errNoToolchain), or fails it when SWITCHYARD_WASM_TOOLCHAINS=1
// (make test-integration installs them); any other error fails it.
func skipWithoutToolchain(t *testing.T, err error) {
	t.Helper()
	switch {
	case err == nil:
	case !errors.Is(err, errNoToolchain):
		t.Fatal(err)
	case os.Getenv("SWITCHYARD_WASM_TOOLCHAINS") == "1":
		t.Fatalf("make test-integration installs the toolchains: %v", err)
	default:
		t.Skip(err)
	}
}

// applied is what `yardctl policy apply -o json` prints.
type applied struct {
	Action, SHA256, PreviousSHA256, ResourceVersion string
	Changes                                         []string
}

// runYardctl runs the yardctl binary bin with args, with KUBECONFIG set to
// kubeconfigEnv (only what the test names), and returns its standard
// output and error.
func runYardctl(ctx context.Context, bin, kubeconfigEnv string, args ...string) (string, string, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfigEnv)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return out.String(), errOut.String(), err
}

// policyState returns the policy status of service (namespace/name) that
// `yardctl state -o json` shows for the daemon at metrics, and the line of
// plain `yardctl state` for it ("" when there is none).
func policyState(ctx context.Context, yardctl, metrics, service string) (*policystage.Status, string, error) {
	out, errOut, err := runYardctl(ctx, yardctl, "", "state", "--address", metrics, "-o", "json")
	if err != nil {
		return nil, "", fmt.Errorf("yardctl state -o json: %v: %s", err, errOut)
	}
	var st reconcile.State
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return nil, "", fmt.Errorf("yardctl state -o json: %w", err)
	}
	i := slices.IndexFunc(st.Policies, func(p policystage.Status) bool { return p.Service == service })
	if i < 0 {
		return nil, "", fmt.Errorf("%s not among the policies of yardctl state", service)
	}
	p := &st.Policies[i]
	text, errOut, err := runYardctl(ctx, yardctl, "", "state", "--address", metrics)
	if err != nil {
		return nil, "", fmt.Errorf("yardctl state: %v: %s", err, errOut)
	}
	for _, line := range strings.Split(text, "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == service && f[1] == p.Policy {
			return p, line, nil
		}
	}
	return p, "", nil
}

// waitPolicyState waits until yardctl state shows that service runs the
// module of digest from the ConfigMap at revision, ready or not, with a
// message containing msg, in -o json and in its plain columns.
func waitPolicyState(t *testing.T, yardctl, metrics, step, service, digest, revision string, ready bool, msg string) {
	t.Helper()
	poll(t, 2*time.Minute, func() error {
		p, line, err := policyState(t.Context(), yardctl, metrics, service)
		if err != nil {
			return fmt.Errorf("%s: %w", step, err)
		}
		if p.Digest != digest || p.Revision != revision || p.Ready != ready || !strings.Contains(p.Message, msg) {
			return fmt.Errorf("%s: %s runs %+v, want sha256 %s, revision %s, ready %v, message with %q", step, service, p, digest, revision, ready, msg)
		}
		wantCols := []string{registry.ShortDigest(digest), revision, yesNoTest(ready)}
		for _, c := range wantCols {
			if !strings.Contains(" "+strings.Join(strings.Fields(line), " ")+" ", " "+c+" ") {
				return fmt.Errorf("%s: yardctl state shows %q for %s, want the columns %q", step, line, service, wantCols)
			}
		}
		return nil
	})
}

// policyLab is what the policy author's tests run against.
type policyLab struct {
	root    string // the checkout
	work    string // a directory for the test's files
	yardctl string // the yardctl binary, built from root
	srv     *apitest.Server
	// daemon is the config of the daemon running against srv as node-a
	// (startPolicyDaemon), its evaluation deadline generous.
	daemon *testConfig
}

// startPolicyLab builds yardctl while a real API server starts, then
// starts the daemon. Cleanup stops them.
func startPolicyLab(t *testing.T) *policyLab {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	type built struct {
		path string
		err  error
	}
	yardctlBuilt := make(chan built, 1)
	go func() { // while the API server starts
		p, err := buildYardctl(root, work)
		yardctlBuilt <- built{p, err}
	}()
	srv := apitest.Start(t)
	b := <-yardctlBuilt
	if b.err != nil {
		t.Fatal(b.err)
	}
	tc := startPolicyDaemon(t, srv, "policies:\n  statisticsInterval: 1h\n  evaluationDeadline: 10s\n").tc
	return &policyLab{root: root, work: work, yardctl: b.path, srv: srv, daemon: tc}
}

// TestIntegrationPolicyApply is the policy author's loop against a real
// API server and a running daemon (dry-run dataplane), for a module built
// from each SDK language: `yardctl policy apply` of a first version, whose
// weights the daemon's plan shows and whose digest and ConfigMap
// resourceVersion `yardctl state` shows; a second version (another
// module) replacing it; a broken module refused by apply, then written
// into the ConfigMap anyway (as kubectl would), which leaves the second
// version running, still evaluated (a new endpoint gets its weight), with
// the error on the Service. A language whose toolchain is missing is
// skipped.
func TestIntegrationPolicyApply(t *testing.T) {
	lab := startPolicyLab(t)
	root, work, yardctl, srv, tc := lab.root, lab.work, lab.yardctl, lab.srv, lab.daemon
	ctx, client := t.Context(), srv.Client

	yardctlRun := func(kubeconfigEnv string, args ...string) (string, string, error) {
		return runYardctl(ctx, yardctl, kubeconfigEnv, args...)
	}
	// apply runs yardctl policy apply with --kubeconfig, or with
	// KUBECONFIG when viaEnv is set.
	apply := func(t *testing.T, viaEnv bool, module, name string, extra ...string) applied {
		t.Helper()
		args := append([]string{"policy", "apply", module, "--name", name, "--deadline", "10s", "-o", "json"}, extra...)
		env := ""
		if viaEnv {
			env = srv.Kubeconfig
		} else {
			args = append(args, "--kubeconfig", srv.Kubeconfig)
		}
		out, errOut, err := yardctlRun(env, args...)
		if err != nil {
			t.Fatalf("yardctl %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
		}
		var res applied
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("yardctl policy apply -o json printed %q: %v", out, err)
		}
		return res
	}
	waitPolicy := func(t *testing.T, step, service, digest, revision string, ready bool, msg string) {
		t.Helper()
		waitPolicyState(t, yardctl, tc.Metrics, step, service, digest, revision, ready, msg)
	}

	canaryParams := `{"canary": "zone=zone-b", "percent": 10}`
	// The languages run at once, each with its own namespace, Service and
	// policy, against the one daemon.
	for _, lang := range []string{"go", "rust", "assemblyscript"} {
		t.Run(lang, func(t *testing.T) {
			t.Parallel()
			var modules [2]string
			for i, example := range []string{"zoneaware", "canary"} {
				b, err := sdkModule(root, yardctl, lang, example)
				skipWithoutToolchain(t, err)
				modules[i] = filepath.Join(work, lang+"-"+example+".wasm")
				if err := os.WriteFile(modules[i], b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			digest := func(path string) string {
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				return registry.Digest(b)
			}
			d1, d2 := digest(modules[0]), digest(modules[1])
			ns := srv.Namespace(t)
			name, service := "zone-"+lang, "web"
			key := ns + "/" + service
			slice := createZonedService(t, client, ns, service, name)
			waitWeights := func(step, want string) {
				t.Helper()
				began := time.Now()
				poll(t, 2*time.Minute, func() error {
					got, err := weightsOf(tc.Metrics, key)
					if err != nil {
						return fmt.Errorf("%s: %w", step, err)
					}
					if got != want {
						return fmt.Errorf("%s: weights %q, want %q", step, got, want)
					}
					return nil
				})
				t.Logf("%s: %q after %s", step, want, time.Since(began).Round(time.Millisecond))
			}

			// 1. The first version.
			res := apply(t, false, modules[0], name)
			if res.Action != "created" || res.SHA256 != d1 {
				t.Fatalf("first apply: %+v, want created with sha256 %s", res, d1)
			}
			waitWeights("first version", "wrr 10.1.0.1:8080=100 10.1.0.2:8080=0")
			waitPolicy(t, "first version", key, d1, res.ResourceVersion, true, "evaluated")

			// 2. A new version replaces it (the cluster named by KUBECONFIG).
			res = apply(t, true, modules[1], name, "--params", canaryParams)
			if res.Action != "updated" || res.SHA256 != d2 || res.PreviousSHA256 != d1 {
				t.Fatalf("second apply: %+v, want updated from sha256 %s to %s", res, d1, d2)
			}
			waitWeights("second version", "wrr 10.1.0.1:8080=9000 10.1.0.2:8080=1000")
			waitPolicy(t, "second version", key, d2, res.ResourceVersion, true, "evaluated")
			good := res.ResourceVersion

			// 3. apply refuses a broken module, and the ConfigMap is left alone.
			broken := filepath.Join(work, lang+"-broken.wasm")
			if err := os.WriteFile(broken, []byte("\x00asm\x01\x00\x00\x00 truncated"), 0o644); err != nil {
				t.Fatal(err)
			}
			args := []string{"policy", "apply", broken, "--name", name, "--kubeconfig", srv.Kubeconfig}
			if out, errOut, err := yardctlRun("", args...); err == nil || !strings.Contains(errOut, "not applied") {
				t.Errorf("yardctl %s = %v, stdout %q, stderr %q; want it refused", strings.Join(args, " "), err, out, errOut)
			}
			cms := client.CoreV1().ConfigMaps(registry.DefaultNamespace)
			if cm, err := cms.Get(ctx, name, metav1.GetOptions{}); err != nil || cm.ResourceVersion != good {
				t.Fatalf("after a refused apply the ConfigMap is at %v (%v), want %s", cm.ResourceVersion, err, good)
			}

			// 4. Written anyway (as kubectl would): the second version keeps
			// running, the Service says why, and it is still evaluated.
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				cm, err := cms.Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				cm.BinaryData = map[string][]byte{registry.KeyModule: []byte("\x00asm\x01\x00\x00\x00 truncated")}
				delete(cm.Data, registry.KeyPin)
				_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			waitPolicy(t, "broken module", key, d2, good, false, "running its last good version, sha256 "+registry.ShortDigest(d2))
			waitCondition(t, client, ns, service, "broken module", metav1.ConditionFalse, "LoadFailed")
			zoneBToo := "zone-b"
			slice.Endpoints = append(slice.Endpoints, slice.Endpoints[1])
			slice.Endpoints[2].Addresses = []string{"10.1.0.3"}
			slice.Endpoints[2].Zone = &zoneBToo
			if _, err := client.DiscoveryV1().EndpointSlices(ns).Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			waitWeights("broken module, a new endpoint", "wrr 10.1.0.1:8080=9000 10.1.0.2:8080=500 10.1.0.3:8080=500")
		})
	}
}

// waitCondition waits for the Service's PolicyReady condition.
func waitCondition(t *testing.T, client kubernetes.Interface, ns, name, step string, status metav1.ConditionStatus, reason string) {
	t.Helper()
	poll(t, 2*time.Minute, func() error {
		svc, err := client.CoreV1().Services(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		i := slices.IndexFunc(svc.Status.Conditions, func(c metav1.Condition) bool { return c.Type == registry.ConditionPolicyReady })
		if i < 0 || svc.Status.Conditions[i].Status != status || svc.Status.Conditions[i].Reason != reason {
			return fmt.Errorf("%s: %s's conditions %+v, want %s %s %s", step, name, svc.Status.Conditions, registry.ConditionPolicyReady, status, reason)
		}
		return nil
	})
}

func yesNoTest(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// weightsOf returns "scheduler addr=weight ..." of the ClusterIP virtual
// service of the Service key (namespace/name) in the daemon's plan.
func weightsOf(metricsAddr, key string) (string, error) {
	return planWeights(metricsAddr, key, func(k string) bool { return k == key })
}
