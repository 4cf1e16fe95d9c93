package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/switchyard-lb/switchyard/plugins/registry"
	"github.com/switchyard-lb/switchyard/test/harness"
	"github.com/switchyard-lb/switchyard/wasm-sdk/walkthrough"
)

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestApplyConfigMap checks what apply writes: a new ConfigMap as pack
// prints it; nothing when it is already so; and over an existing
// ConfigMap, the policy keys and label only, with the changes named. The
// modules are small stand-ins (applyConfigMap does not load them; packing
// the SDK's, over a MiB each, is slow under the race detector); the
// second is over the compression threshold.
func TestApplyConfigMap(t *testing.T) {
	ctx := context.Background()
	za := []byte("\x00asm\x01\x00\x00\x00 a first module")
	ca := append([]byte("\x00asm\x01\x00\x00\x00 a second module "), bytes.Repeat([]byte{7}, DefaultGzipOver)...)
	zaDigest, caDigest := registry.Digest(za), registry.Digest(ca)
	ns := registry.DefaultNamespace
	want, err := packPolicy(za, "zone", ns, []byte(`{"localWeight": 5}`), DefaultGzipOver)
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset()
	cms := client.CoreV1().ConfigMaps(ns)

	res, err := applyConfigMap(ctx, client, want)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&applyResult{Namespace: ns, Name: "zone", Action: "created", SHA256: zaDigest}, res); diff != "" {
		t.Errorf("create (-want +got):\n%s", diff)
	}
	got, err := cms.Get(ctx, "zone", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for what, diff := range map[string]string{
		"labels":     cmp.Diff(want.Labels, got.Labels),
		"data":       cmp.Diff(want.Data, got.Data),
		"binaryData": cmp.Diff(want.BinaryData, got.BinaryData),
	} {
		if diff != "" {
			t.Errorf("created ConfigMap's %s (-want +got):\n%s", what, diff)
		}
	}

	client.ClearActions()
	res, err = applyConfigMap(ctx, client, want)
	if err != nil {
		t.Fatal(err)
	}
	if res.Action != "unchanged" || len(res.Changes) > 0 || res.PreviousSHA256 != zaDigest {
		t.Errorf("the same again: %+v, want unchanged", res)
	}
	for _, a := range client.Actions() {
		if a.GetVerb() != "get" {
			t.Errorf("the same again: %s %s, want only a get", a.GetVerb(), a.GetResource().Resource)
		}
	}

	// Someone's ConfigMap: unlabelled, the module under data (as kubectl
	// create configmap --from-file may put it), their own keys.
	if err := cms.Delete(ctx, "zone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	theirs := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "zone", Namespace: ns, Labels: map[string]string{"team": "web"}, Annotations: map[string]string{"owner": "me"}},
		Data:       map[string]string{registry.KeyModule: "\x00asm...", "notes.txt": "keep me", registry.KeyParams: `{"localWeight": 9}`},
		BinaryData: map[string][]byte{"other.bin": {1, 2}},
	}
	if _, err := cms.Create(ctx, theirs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	res, err = applyConfigMap(ctx, client, want)
	if err != nil {
		t.Fatal(err)
	}
	wantRes := &applyResult{Namespace: ns, Name: "zone", Action: "updated", SHA256: zaDigest, Changes: []string{
		"label switchyard.dev/policy=true added",
		"module sha256 none -> " + zaDigest[:12],
		"data policy.wasm removed (a module belongs under binaryData)",
		`params.json {"localWeight": 9} -> {"localWeight": 5}`,
	}}
	if diff := cmp.Diff(wantRes, res); diff != "" {
		t.Errorf("over their ConfigMap (-want +got):\n%s", diff)
	}
	got, err = cms.Get(ctx, "zone", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"team": "web", registry.Label: "true"}, got.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"owner": "me"}, got.Annotations); diff != "" {
		t.Errorf("annotations (-want +got):\n%s", diff)
	}
	wantData := map[string]string{"notes.txt": "keep me", registry.KeyParams: `{"localWeight": 5}`, registry.KeyPin: zaDigest}
	if diff := cmp.Diff(wantData, got.Data); diff != "" {
		t.Errorf("data (-want +got):\n%s", diff)
	}
	if m, _, err := registry.Decode(got, registry.DefaultMaxModuleSize); err != nil || !bytes.Equal(m, za) {
		t.Errorf("the ConfigMap decodes to %d bytes, %v; want the module", len(m), err)
	}
	if len(got.BinaryData) != 2 || !bytes.Equal(got.BinaryData["other.bin"], []byte{1, 2}) {
		t.Errorf("binaryData has %d keys, want other.bin and the module", len(got.BinaryData))
	}

	// A new module, without parameters.
	next, err := packPolicy(ca, "zone", ns, nil, DefaultGzipOver)
	if err != nil {
		t.Fatal(err)
	}
	res, err = applyConfigMap(ctx, client, next)
	if err != nil {
		t.Fatal(err)
	}
	wantRes = &applyResult{Namespace: ns, Name: "zone", Action: "updated", SHA256: caDigest, PreviousSHA256: zaDigest, Changes: []string{
		"module sha256 " + zaDigest[:12] + " -> " + caDigest[:12],
		`params.json removed (was {"localWeight": 5})`,
	}}
	if diff := cmp.Diff(wantRes, res); diff != "" {
		t.Errorf("a new module (-want +got):\n%s", diff)
	}
	got, err = cms.Get(ctx, "zone", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m, _, err := registry.Decode(got, registry.DefaultMaxModuleSize); err != nil || !bytes.Equal(m, ca) {
		t.Errorf("the ConfigMap decodes to %d bytes, %v; want the new module", len(m), err)
	}
	var keys []string
	for k := range got.BinaryData {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if diff := cmp.Diff([]string{"other.bin", registry.KeyModuleGzip}, keys); diff != "" {
		t.Errorf("binaryData keys, compressed now (-want +got):\n%s", diff)
	}
}

// watchRun runs an applier's watch until the test ends, with its output
// and errors in out and errw.
type watchRun struct {
	out, errw harness.Buffer
	// limit bounds each waitFor.
	limit time.Duration
}

// start runs a.watch, printing to w.out and w.errw, until the test ends.
func (w *watchRun) start(t *testing.T, a *applier) {
	a.out = &w.out
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.watch(ctx, &w.errw, 20*time.Millisecond) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("watch returned %v after cancel, want nil", err)
		}
	})
}

// waitFor polls cond until it holds, failing the test after w.limit.
func (w *watchRun) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	harness.Poll(t, w.limit, func() error {
		if !cond() {
			return fmt.Errorf("waiting for %s; output:\n%s\nerrors:\n%s", what, w.out.String(), w.errw.String())
		}
		return nil
	})
}

// TestApplyWatch checks the hot-reload loop: the module is applied at
// start, a rebuild that fails the checks is reported and not applied,
// and the next good one (and a change of the parameters file) is. It
// checks and packs the SDK's module three times, which takes long under
// the race detector: make test-unit runs it without.
func TestApplyWatch(t *testing.T) {
	if raceEnabled {
		t.Skip("checks and compresses a Go module three times, too slow under the race detector; make test-unit runs it without")
	}
	dir := t.TempDir()
	module, params := filepath.Join(dir, "policy.wasm"), filepath.Join(dir, "params.json")
	write := func(path string, b []byte) {
		t.Helper()
		// Through a rename, as a build writes its output.
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	za := mustRead(t, zoneAware)
	write(module, za)
	write(params, []byte(`{"localWeight": 5}`))

	client := fake.NewClientset()
	opts := &packOptions{name: "zone", namespace: registry.DefaultNamespace, params: params, gzipOver: DefaultGzipOver, deadline: generousTestDeadline}
	w := &watchRun{limit: 2 * time.Minute}
	w.start(t, &applier{client: client, path: module, opts: opts})
	ctx := context.Background()
	cms := client.CoreV1().ConfigMaps(registry.DefaultNamespace)
	waitFor := func(what string, cond func() bool) { t.Helper(); w.waitFor(t, what, cond) }
	out, errw := &w.out, &w.errw
	params7 := func() bool {
		cm, err := cms.Get(ctx, "zone", metav1.GetOptions{})
		return err == nil && cm.Data[registry.KeyParams] == `{"localWeight": 7}`
	}
	waitFor("the first apply", func() bool { return strings.Contains(out.String(), "configmap switchyard-system/zone created") })

	write(module, []byte("package main // a source file, not a module"))
	waitFor("the broken build reported", func() bool { return strings.Contains(errw.String(), "is not a WebAssembly module") })
	cm, err := cms.Get(ctx, "zone", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m, _, err := registry.Decode(cm, registry.DefaultMaxModuleSize); err != nil || !bytes.Equal(m, za) {
		t.Errorf("after a broken build the ConfigMap decodes to %d bytes (%v), want the good module kept", len(m), err)
	}
	if !strings.Contains(errw.String(), "(waiting for policy.wasm to change)") {
		t.Errorf("the report does not say what watch waits for:\n%s", errw.String())
	}

	write(module, za)
	write(params, []byte(`{"localWeight": 7}`))
	waitFor("the fixed build applied", params7)
	waitFor("the update printed", func() bool {
		return strings.Contains(out.String(), `params.json {"localWeight": 5} -> {"localWeight": 7}`)
	})
}

// TestApplyNeedsACluster: without a reachable kubeconfig apply fails
// with what to do, after its checks.
func TestApplyNeedsACluster(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	t.Setenv("HOME", t.TempDir())
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	code, _, errOut := yardctl(t, "policy", "apply", zoneAware, "--name", "zone")
	if code != exitError || !strings.Contains(errOut, "no cluster to apply to") || !strings.Contains(errOut, "--kubeconfig") {
		t.Errorf("apply without a cluster = %d, stderr %q", code, errOut)
	}
	code, _, errOut = yardctl(t, "policy", "apply", zoneAware, "--name", "Zone_A")
	if code != exitUsage || !strings.Contains(errOut, "not a valid ConfigMap name") {
		t.Errorf("apply --name Zone_A = %d, stderr %q, want the name refused first", code, errOut)
	}
	code, _, errOut = yardctl(t, "policy", "apply", zoneAware, "--name", "zone", "--lang", "go")
	if code != exitUsage || !strings.Contains(errOut, "build a policy's source; "+zoneAware+" is a module") {
		t.Errorf("apply MODULE --lang go = %d, stderr %q, want the build flag refused", code, errOut)
	}
	code, out, _ := yardctl(t, "policy", "apply", zoneAware, "--name", "zone", "-o", "json")
	var res struct {
		Error    string `json:"error"`
		ExitCode int    `json:"exitCode"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != exitError || res.ExitCode != exitError || !strings.Contains(res.Error, "no cluster to apply to") {
		t.Errorf("apply -o json without a cluster = %d, stdout %q (%v), want the error as JSON", code, out, err)
	}
}

// generousTestDeadline is the evaluation deadline of the tests that call
// packFile directly: a loaded machine must not fail them.
const generousTestDeadline = 2 * time.Minute

// TestApplyWatchSource checks the edit loop from a policy's source: the
// Go walkthrough of wasm-sdk/README.md (a new policy with a list
// parameter and its expectation scenarios, taken from the page), in a
// directory of its own outside the repository as the page makes it (a
// go.mod that replaces the SDK's module with this checkout). apply --watch builds the source with policy
// build's own code, checks the module against the expectations and
// applies it; an edit that misses the expectations, and one that does not
// compile, are reported and nothing is applied; the next good edit is
// built, checked and applied. Each round says what it did. It runs the Go
// compiler four times, too slow under the race detector: make test-unit
// runs it without.
func TestApplyWatchSource(t *testing.T) {
	if raceEnabled {
		t.Skip("builds and packs a Go module four times, too slow under the race detector; make test-unit runs it without")
	}
	if testing.Short() {
		t.Skip("runs the Go compiler")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	layout, err := walkthrough.Setup(t.Context(), root, dir, walkthrough.Go)
	if err != nil {
		t.Fatal(err)
	}
	src := layout.Source
	scenarios := filepath.Join(dir, "scenarios")
	// edit writes the policy's source with old replaced by new.
	edit := func(old, new string) {
		t.Helper()
		changed := strings.Replace(src.Content, old, new, 1)
		if changed == src.Content {
			t.Fatalf("the walkthrough's %s has no %q to edit", src.Path, old)
		}
		if err := os.WriteFile(filepath.Join(dir, src.Path), []byte(changed), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	client := fake.NewClientset()
	opts := &packOptions{name: "least-zone", namespace: registry.DefaultNamespace, scenario: scenarios, gzipOver: DefaultGzipOver, deadline: generousTestDeadline}
	w := &watchRun{limit: 5 * time.Minute} // four Go builds on a loaded machine
	b, err := newBuilder(dir, &buildOptions{}, &w.errw)
	if err != nil {
		t.Fatal(err)
	}
	w.start(t, &applier{client: client, path: dir, build: b, opts: opts})
	cms := client.CoreV1().ConfigMaps(registry.DefaultNamespace)
	waitFor := func(what string, cond func() bool) { t.Helper(); w.waitFor(t, what, cond) }
	out, errw := &w.out, &w.errw
	applied := func() string {
		t.Helper()
		cm, err := cms.Get(context.Background(), "least-zone", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cm.Data[registry.KeyPin]
	}

	waitFor("the first build applied", func() bool { return strings.Contains(out.String(), "configmap switchyard-system/least-zone created") })
	module := filepath.Join(dir, "policy.wasm")
	for _, want := range []string{
		"built " + dir + " (go): " + module + ", ",
		"checked with the expectations of " + scenarios + ": passed\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the first round does not say %q:\n%s", want, out.String())
		}
	}
	first := applied()
	if first != registry.Digest(mustRead(t, module)) {
		t.Errorf("the ConfigMap pins %s, not the module built", first)
	}

	// An edit whose decisions miss the expectations.
	edit("1000/", "2000/")
	waitFor("the missed expectations reported", func() bool {
		return strings.Contains(errw.String(), "not applied: "+module+" loads but misses the expectations of "+filepath.Join(scenarios, "spread.yaml")+
			":\n  10.0.0.1:8080 (node-a, zone-a): weight 2000, want 1000\n")
	})
	if !strings.Contains(errw.String(), "(waiting for "+filepath.Base(dir)+" to change)") {
		t.Errorf("the report does not say what watch waits for:\n%s", errw.String())
	}
	if got := applied(); got != first {
		t.Errorf("a module that misses its expectations was applied: pin %s, want %s", got, first)
	}

	// An edit that does not compile.
	edit("func main() {}", "func main() {}\n\nfunc broken() { undefined() }")
	waitFor("the failed build reported", func() bool { return strings.Contains(errw.String(), "not applied: go build for wasip1 in "+dir) })
	if !strings.Contains(errw.String(), "undefined: undefined") {
		t.Errorf("the compiler's message is not shown:\n%s", errw.String())
	}
	if got := applied(); got != first {
		t.Errorf("a failed build changed the ConfigMap: pin %s, want %s", got, first)
	}

	// A good edit (a cap no scenario reaches): built, checked and applied.
	edit("out.SetScheduler", "_ = min(in.Len(), 1<<16)\n\tout.SetScheduler")
	waitFor("the good edit applied", func() bool {
		return strings.Contains(out.String(), "module sha256 "+registry.ShortDigest(first)+" -> ")
	})
	if got := applied(); got == first || got != registry.Digest(mustRead(t, module)) {
		t.Errorf("after the good edit the ConfigMap pins %s, want the new module's %s", got, registry.Digest(mustRead(t, module)))
	}
	if n := strings.Count(out.String(), "built "+dir); n != 2 {
		t.Errorf("%d rounds say what they built, want the 2 that applied:\n%s", n, out.String())
	}
}
