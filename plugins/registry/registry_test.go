package registry_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/plugins/lastgood"
	"github.com/switchyard-lb/switchyard/plugins/registry"
	"github.com/switchyard-lb/switchyard/test/harness"
)

func gz(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func policyCM(name string, binary map[string][]byte, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: registry.DefaultNamespace, Labels: map[string]string{registry.Label: "true"}},
		BinaryData: binary, Data: data,
	}
}

func TestDecode(t *testing.T) {
	mod := []byte("\x00asm\x01\x00\x00\x00module bytes")
	pin := registry.Digest(mod)
	for _, tc := range []struct {
		name       string
		cm         *corev1.ConfigMap
		wantModule []byte
		wantParams string
		wantErr    error
	}{
		{"plain", policyCM("p", map[string][]byte{registry.KeyModule: mod}, nil), mod, "", nil},
		{"gzip with params and pin", policyCM("p", map[string][]byte{registry.KeyModuleGzip: gz(t, mod)},
			map[string]string{registry.KeyParams: `{"a":1}`, registry.KeyPin: " " + pin + "\n"}), mod, `{"a":1}`, nil},
		{"pin mismatch", policyCM("p", map[string][]byte{registry.KeyModule: mod},
			map[string]string{registry.KeyPin: registry.Digest([]byte("other"))}), nil, "", registry.ErrPinMismatch},
		{"pin over the compressed bytes is refused", policyCM("p", map[string][]byte{registry.KeyModuleGzip: gz(t, mod)},
			map[string]string{registry.KeyPin: registry.Digest(gz(t, mod))}), nil, "", registry.ErrPinMismatch},
		{"both keys", policyCM("p", map[string][]byte{registry.KeyModule: mod, registry.KeyModuleGzip: gz(t, mod)}, nil), nil, "", registry.ErrBadConfigMap},
		{"no module", policyCM("p", nil, nil), nil, "", registry.ErrBadConfigMap},
		{"bad gzip", policyCM("p", map[string][]byte{registry.KeyModuleGzip: mod}, nil), nil, "", registry.ErrBadConfigMap},
		{"gzip bomb", policyCM("p", map[string][]byte{registry.KeyModuleGzip: gz(t, make([]byte, 1<<20))}, nil), nil, "", registry.ErrBadConfigMap},
		{"bad params", policyCM("p", map[string][]byte{registry.KeyModule: mod}, map[string]string{registry.KeyParams: "{"}), nil, "", registry.ErrBadConfigMap},
	} {
		t.Run(tc.name, func(t *testing.T) {
			module, params, err := registry.Decode(tc.cm, 64<<10)
			if !errors.Is(err, tc.wantErr) || (err != nil) != (tc.wantErr != nil) {
				t.Fatalf("Decode error = %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tc.wantModule, module); diff != "" {
				t.Errorf("module (-want +got):\n%s", diff)
			}
			if string(params) != tc.wantParams {
				t.Errorf("params = %q, want %q", params, tc.wantParams)
			}
		})
	}
}

// A module under data (where kubectl create configmap --from-file puts a
// file that is valid UTF-8) is reported as exactly that, with the fix.
func TestDecodeModuleUnderData(t *testing.T) {
	for _, key := range []string{registry.KeyModule, registry.KeyModuleGzip} {
		_, _, err := registry.Decode(policyCM("least-loaded", nil, map[string]string{key: "\x00asm\x01\x00\x00\x00"}), 64<<10)
		want := registry.DefaultNamespace + "/least-loaded: the module " + key + " is under data, not binaryData " +
			"(kubectl create configmap --from-file puts a file that happens to be valid UTF-8 under data); " +
			"rewrite the ConfigMap with `yardctl policy apply FILE --name least-loaded`, which moves it to binaryData"
		if !errors.Is(err, registry.ErrBadConfigMap) || err == nil || !bytes.HasSuffix([]byte(err.Error()), []byte(want)) {
			t.Errorf("%s under data: error %v, want ErrBadConfigMap ending %q", key, err, want)
		}
	}
}

// fakeModule is a loaded module: a policy named after its bytes.
type fakeModule struct {
	name   string
	closed chan struct{}
}

func (m *fakeModule) Name() string { return m.name }
func (m *fakeModule) Evaluate(context.Context, *plugin.PolicyInput) (plugin.PolicyResult, error) {
	return plugin.PolicyResult{}, nil
}
func (m *fakeModule) Close(context.Context) error { close(m.closed); return nil }

// loader loads every module except "garbage" and counts loads.
type loader struct {
	mu      sync.Mutex
	loads   []string
	modules []*fakeModule
}

func (l *loader) load(_ context.Context, _ string, module []byte) (registry.Module, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.loads = append(l.loads, string(module))
	if string(module) == "garbage" {
		return nil, errors.New("invalid policy module: garbage")
	}
	m := &fakeModule{name: string(module), closed: make(chan struct{})}
	l.modules = append(l.modules, m)
	return m, nil
}

func (l *loader) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.loads)
}

// waitLimit bounds the tests' waits. It bounds a failure only: a passing
// wait ends as soon as its condition holds, and a loaded machine must not
// fail a test that would pass.
const waitLimit = 2 * time.Minute

func TestRegistry(t *testing.T) {
	client := fake.NewClientset(
		policyCM("canary", map[string][]byte{registry.KeyModule: []byte("v1")}, map[string]string{registry.KeyParams: `{"w":1}`}),
		// Not labelled: ignored.
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: registry.DefaultNamespace}, BinaryData: map[string][]byte{registry.KeyModule: []byte("x")}},
	)
	ld := &loader{}
	changes := make(chan struct{}, 100)
	r := registry.New(client, registry.Options{Load: ld.load, RetireAfter: time.Millisecond, OnChange: func() { changes <- struct{}{} }}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	harness.Poll(t, waitLimit, harness.Cond("HasSynced", r.HasSynced))

	type resolved struct {
		Name, Policy, Digest, Params, Err string
	}
	resolve := func(policy string) resolved {
		name, p, params, err := r.Resolve(&model.Service{Policy: policy})
		out := resolved{Name: name, Params: string(params)}
		if p != nil {
			out.Policy = p.Name()
		}
		if v, ok := p.(plugin.Versioned); ok {
			out.Digest = v.PolicyVersion().Digest
		}
		if err != nil {
			out.Err = err.Error()
		}
		return out
	}
	var changed []string
	waitChanged := func(what string) {
		t.Helper()
		changed = nil
		harness.Poll(t, waitLimit, harness.Cond(what, func() bool { changed = append(changed, r.Changed()...); return len(changed) > 0 }))
	}
	cms := client.CoreV1().ConfigMaps(registry.DefaultNamespace)
	update := func(cm *corev1.ConfigMap) {
		t.Helper()
		if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	digest := func(module string) string { return registry.Digest([]byte(module)) }
	// closed reports whether the module loaded from bytes was closed.
	closed := func(module string) bool {
		ld.mu.Lock()
		defer ld.mu.Unlock()
		for _, m := range ld.modules {
			if m.name == module {
				select {
				case <-m.closed:
					return true
				default:
				}
			}
		}
		return false
	}
	for _, s := range []struct {
		name        string
		do          func()
		wantChanged []string
		want        map[string]resolved
		wantLoads   int
		// wantClosed waits for these modules to be retired.
		wantClosed []string
	}{{
		name:        "initial",
		do:          func() {},
		wantChanged: []string{"canary"},
		want: map[string]resolved{
			"":                    {Name: "builtin:uniform", Policy: "uniform"},
			"builtin:local-first": {Name: "builtin:local-first", Policy: "local-first"},
			"builtin:nope":        {Name: "builtin:nope", Err: `policy not found (no such policy): no built-in policy "nope" (have local-first, topology-aware, uniform)`},
			"canary":              {Name: "canary", Policy: "v1", Digest: digest("v1"), Params: `{"w":1}`},
			"other":               {Name: "other", Err: "policy not found (no such policy): no ConfigMap switchyard-system/other labelled switchyard.dev/policy=true"},
		},
		wantLoads: 1,
	}, {
		name: "new params reuse the module",
		do: func() {
			update(policyCM("canary", map[string][]byte{registry.KeyModule: []byte("v1")}, map[string]string{registry.KeyParams: `{"w":2}`}))
		},
		wantChanged: []string{"canary"},
		want:        map[string]resolved{"canary": {Name: "canary", Policy: "v1", Digest: digest("v1"), Params: `{"w":2}`}},
		wantLoads:   1,
	}, {
		name: "a new module is loaded",
		do: func() {
			update(policyCM("canary", map[string][]byte{registry.KeyModuleGzip: gz(t, []byte("v2"))}, nil))
		},
		wantChanged: []string{"canary"},
		want:        map[string]resolved{"canary": {Name: "canary", Policy: "v2", Digest: digest("v2")}},
		wantLoads:   2,
		wantClosed:  []string{"v1"},
	}, {
		name: "a garbage module fails to load: the last good version stays, with its parameters",
		do: func() {
			update(policyCM("canary", map[string][]byte{registry.KeyModule: []byte("garbage")}, map[string]string{registry.KeyParams: `{"w":3}`}))
		},
		wantChanged: []string{"canary"},
		want: map[string]resolved{"canary": {Name: "canary", Policy: "v2", Digest: digest("v2"),
			Err: "invalid policy module: garbage (running its last good version, sha256 " + digest("v2")[:12] + ", instead)"}},
		wantLoads: 3,
	}, {
		name: "a module that misses its pin does not replace it either",
		do: func() {
			update(policyCM("canary", map[string][]byte{registry.KeyModule: []byte("v3")}, map[string]string{registry.KeyPin: digest("v4")}))
		},
		wantChanged: []string{"canary"},
		want: map[string]resolved{"canary": {Name: "canary", Policy: "v2", Digest: digest("v2"),
			Err: "invalid policy ConfigMap switchyard-system/canary: module digest differs from its sha256 pin: module " + digest("v3") + ", pin " + digest("v4") +
				" (running its last good version, sha256 " + digest("v2")[:12] + ", instead)"}},
		wantLoads: 3,
	}, {
		name:        "a good module replaces the last good version",
		do:          func() { update(policyCM("canary", map[string][]byte{registry.KeyModule: []byte("v3")}, nil)) },
		wantChanged: []string{"canary"},
		want:        map[string]resolved{"canary": {Name: "canary", Policy: "v3", Digest: digest("v3")}},
		wantLoads:   4,
		wantClosed:  []string{"v2"},
	}, {
		name: "a policy that never loaded has no version to fall back to",
		do: func() {
			if _, err := cms.Create(ctx, policyCM("broken", map[string][]byte{registry.KeyModule: []byte("garbage")}, nil), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		},
		wantChanged: []string{"broken"},
		want:        map[string]resolved{"broken": {Name: "broken", Err: "invalid policy module: garbage"}},
		wantLoads:   5,
	}, {
		name: "the cluster default changes",
		do: func() {
			if _, err := cms.Create(ctx, policyCM("zone", map[string][]byte{registry.KeyModule: []byte("z")}, nil), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			harness.Poll(t, waitLimit, harness.Cond("zone loaded", func() bool { return ld.count() == 6 }))
			r.Changed()
			r.SetDefault("zone")
		},
		wantChanged: []string{"builtin:uniform", "zone"},
		want:        map[string]resolved{"": {Name: "zone", Policy: "z", Digest: digest("z")}},
		wantLoads:   6,
	}, {
		name: "deleted",
		do: func() {
			if err := cms.Delete(ctx, "zone", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		},
		wantChanged: []string{"zone"},
		want:        map[string]resolved{"": {Name: "zone", Err: "policy not found (no such policy): no ConfigMap switchyard-system/zone labelled switchyard.dev/policy=true"}},
		wantLoads:   6,
		wantClosed:  []string{"z"},
	}} {
		s.do()
		waitChanged(s.name)
		if diff := cmp.Diff(s.wantChanged, changed); diff != "" {
			t.Errorf("%s: Changed (-want +got):\n%s", s.name, diff)
		}
		got := map[string]resolved{}
		for ref := range s.want {
			got[ref] = resolve(ref)
		}
		if diff := cmp.Diff(s.want, got); diff != "" {
			t.Errorf("%s: Resolve (-want +got):\n%s", s.name, diff)
		}
		if n := ld.count(); n != s.wantLoads {
			t.Errorf("%s: %d loads, want %d", s.name, n, s.wantLoads)
		}
		for _, m := range s.wantClosed {
			harness.Poll(t, waitLimit, harness.Cond(s.name+": module "+m+" retired", func() bool { return closed(m) }))
		}
		if p := resolve("canary"); p.Policy != "" && closed(p.Policy) {
			t.Errorf("%s: canary resolves to module %s, which is closed", s.name, p.Policy)
		}
	}
}

// TestRegistryLastGoodOnDisk: the last good version of a policy outlives
// the registry (a daemon restart): a registry started while the
// ConfigMap is broken runs the version kept on disk, says so, and keeps
// the next good version instead; a damaged file is ignored and removed;
// the ConfigMap's deletion, while running or while no registry ran,
// removes what is kept.
func TestRegistryLastGoodOnDisk(t *testing.T) {
	ctx := context.Background()
	dir, err := lastgood.New(filepath.Join(t.TempDir(), "last-good"), registry.DefaultMaxModuleSize)
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset(policyCM("canary", map[string][]byte{registry.KeyModule: []byte("v1")}, map[string]string{registry.KeyParams: `{"w":1}`}))
	cms := client.CoreV1().ConfigMaps(registry.DefaultNamespace)
	type resolved struct {
		Policy, Digest, Revision, Params, Err string
	}
	// run runs a registry (a daemon) until the returned stop is called.
	run := func() (*registry.Registry, *loader, func()) {
		ld := &loader{}
		r := registry.New(client, registry.Options{Load: ld.load, RetireAfter: time.Millisecond, LastGood: dir}, nil)
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); r.Run(rctx) }()
		harness.Poll(t, waitLimit, harness.Cond("HasSynced", r.HasSynced))
		return r, ld, func() { cancel(); <-done }
	}
	resolve := func(r *registry.Registry) resolved {
		_, p, params, err := r.Resolve(&model.Service{Policy: "canary"})
		var out resolved
		if p != nil {
			out.Policy, out.Params = p.Name(), string(params)
			v := p.(plugin.Versioned).PolicyVersion()
			out.Digest, out.Revision = v.Digest, v.Revision
		}
		if err != nil {
			out.Err = err.Error()
		}
		return out
	}
	kept := func() string {
		v, err := dir.Load("canary")
		if err != nil {
			return err.Error()
		}
		return string(v.Module) + " " + string(v.Params)
	}
	update := func(data string, module string) {
		t.Helper()
		cm := policyCM("canary", map[string][]byte{registry.KeyModule: []byte(module)}, nil)
		if data != "" {
			cm.Data = map[string]string{registry.KeyParams: data}
		}
		if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	digest := func(module string) string { return registry.Digest([]byte(module)) }

	// A daemon loads v1, and keeps it.
	r, _, stop := run()
	if got := resolve(r); got.Policy != "v1" || got.Err != "" {
		t.Errorf("the first daemon resolves %+v, want v1", got)
	}
	cm, err := cms.Get(ctx, "canary", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v1Revision := cm.ResourceVersion
	if got := kept(); got != `v1 {"w":1}` {
		t.Errorf("kept after v1 loaded: %s", got)
	}
	stop()

	// While it is down, the ConfigMap breaks; the restarted daemon runs
	// v1, from disk, with its parameters.
	update("", "garbage")
	r, ld, stop := run()
	want := resolved{Policy: "v1", Digest: digest("v1"), Revision: v1Revision, Params: `{"w":1}`,
		Err: "invalid policy module: garbage (running its last good version, sha256 " + digest("v1")[:12] +
			", kept on this node's disk from revision " + v1Revision + ", instead)"}
	if diff := cmp.Diff(want, resolve(r)); diff != "" {
		t.Errorf("restarted on a broken ConfigMap (-want +got):\n%s", diff)
	}

	// A new good version replaces it, on disk too.
	update(`{"w":2}`, "v2")
	harness.Poll(t, waitLimit, harness.Cond("v2 loaded", func() bool { return resolve(r).Policy == "v2" }))
	if got := kept(); got != `v2 {"w":2}` {
		t.Errorf("kept after v2 loaded: %s", got)
	}
	update(`{"w":3}`, "v2")
	harness.Poll(t, waitLimit, harness.Cond("v2's new parameters", func() bool { return resolve(r).Params == `{"w":3}` }))
	if got := kept(); got != `v2 {"w":3}` {
		t.Errorf("kept after new parameters: %s", got)
	}
	ld.mu.Lock()
	if diff := cmp.Diff([]string{"garbage", "v1", "v2"}, ld.loads); diff != "" {
		t.Errorf("loads: the broken module, v1 from disk, v2 (-want +got):\n%s", diff)
	}
	ld.mu.Unlock()
	stop()

	// A damaged file is ignored (and removed): the restarted daemon has no
	// last good version.
	update("", "garbage")
	names, _ := dir.Names()
	if diff := cmp.Diff([]string{"canary"}, names); diff != "" {
		t.Fatalf("kept (-want +got):\n%s", diff)
	}
	damage(t, dir, "canary")
	r, _, stop = run()
	if diff := cmp.Diff(resolved{Err: "invalid policy module: garbage"}, resolve(r)); diff != "" {
		t.Errorf("restarted with a damaged file (-want +got):\n%s", diff)
	}
	if _, err := dir.Load("canary"); !errors.Is(err, lastgood.ErrNone) {
		t.Errorf("the damaged file is still kept: %v", err)
	}

	// Deleted while running: forgotten.
	update("", "v3")
	harness.Poll(t, waitLimit, harness.Cond("v3 loaded", func() bool { return resolve(r).Policy == "v3" }))
	if err := cms.Delete(ctx, "canary", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	harness.Poll(t, waitLimit, harness.Cond("the deletion seen", func() bool { return resolve(r).Policy == "" }))
	if _, err := dir.Load("canary"); !errors.Is(err, lastgood.ErrNone) {
		t.Errorf("kept after the ConfigMap was deleted: %v", err)
	}
	stop()

	// Deleted while no daemon ran: pruned at the next start.
	if err := dir.Save("gone", lastgood.Version{Digest: digest("g"), Module: []byte("g")}); err != nil {
		t.Fatal(err)
	}
	_, _, stop = run()
	stop()
	if names, err := dir.Names(); err != nil || len(names) != 0 {
		t.Errorf("kept after a start without their ConfigMaps: %v, %v", names, err)
	}
}

// damage flips the last byte of name's kept module.
func damage(t *testing.T, dir *lastgood.Dir, name string) {
	t.Helper()
	v, err := dir.Load(name)
	if err != nil {
		t.Fatal(err)
	}
	want := v.Digest
	v.Module[len(v.Module)-1] ^= 0xff
	if err := dir.Save(name, v); err != nil { // a record whose digest no longer matches
		t.Fatal(err)
	}
	if v.Digest != want {
		t.Fatal("damage changed the record")
	}
}

// TestRegistryResolvesAsItLoads: before the first load is over, a
// ConfigMap policy not tried yet is still loading (plugin.ErrPolicyLoading,
// which the loop holds Services back for, not a failure), and each one
// resolves as soon as it has loaded; once synced, an unknown name is not
// found.
func TestRegistryResolvesAsItLoads(t *testing.T) {
	client := fake.NewClientset(
		policyCM("a", map[string][]byte{registry.KeyModule: []byte("a")}, nil),
		policyCM("b", map[string][]byte{registry.KeyModule: []byte("b")}, nil),
	)
	ld := &loader{}
	release := make(chan struct{})
	load := func(ctx context.Context, name string, module []byte) (registry.Module, error) {
		if name == "b" { // a compiles at once, b takes its time
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return ld.load(ctx, name, module)
	}
	r := registry.New(client, registry.Options{Load: load}, nil)
	resolveErr := func(policy string) error {
		_, _, _, err := r.Resolve(&model.Service{Policy: policy})
		return err
	}
	for _, name := range []string{"a", "b", "missing"} {
		if err := resolveErr(name); !errors.Is(err, plugin.ErrPolicyLoading) {
			t.Errorf("Resolve(%s) before Run = %v, want plugin.ErrPolicyLoading", name, err)
		}
	}
	if err := resolveErr("builtin:uniform"); err != nil {
		t.Errorf("Resolve(builtin:uniform) before Run = %v, want it resolved: built-ins never load", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	harness.Poll(t, waitLimit, harness.Cond("a resolved", func() bool { return resolveErr("a") == nil }))
	if r.HasSynced() {
		t.Fatal("HasSynced while b is still loading")
	}
	for _, name := range []string{"b", "missing"} {
		if err := resolveErr(name); !errors.Is(err, plugin.ErrPolicyLoading) {
			t.Errorf("Resolve(%s) while b loads = %v, want plugin.ErrPolicyLoading", name, err)
		}
	}
	close(release)
	harness.Poll(t, waitLimit, harness.Cond("HasSynced", r.HasSynced))
	if err := resolveErr("b"); err != nil {
		t.Errorf("Resolve(b) after the load = %v", err)
	}
	if err := resolveErr("missing"); !errors.Is(err, plugin.ErrNoPolicy) || errors.Is(err, plugin.ErrPolicyLoading) {
		t.Errorf("Resolve(missing) once synced = %v, want plugin.ErrNoPolicy only", err)
	}
}
