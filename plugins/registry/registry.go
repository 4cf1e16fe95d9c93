package registry

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/plugins/builtin"
	"github.com/switchyard-lb/switchyard/plugins/lastgood"
	"github.com/switchyard-lb/switchyard/plugins/wasm"
)

// Names of the delivery format (see the package documentation).
const (
	DefaultNamespace = "switchyard-system"
	Label            = "switchyard.dev/policy"
	KeyModule        = "policy.wasm"
	KeyModuleGzip    = "policy.wasm.gz"
	KeyParams        = "params.json"
	KeyPin           = "sha256"
	BuiltinPrefix    = "builtin:"
	// Fallback is the policy of Services when neither their annotation
	// nor the cluster default names one.
	Fallback = BuiltinPrefix + builtin.UniformName
)

// DefaultMaxModuleSize caps a module, compressed or not.
const DefaultMaxModuleSize = 32 << 20

// DefaultRetireAfter is how long a replaced module stays open, so that an
// evaluation that resolved it just before finishes.
const DefaultRetireAfter = time.Minute

// Errors a Resolve or a load may wrap.
var (
	// ErrNotFound wraps plugin.ErrNoPolicy: the loop then falls back
	// to uniform weights rather than the gone policy's last result.
	ErrNotFound      = fmt.Errorf("policy not found (%w)", plugin.ErrNoPolicy)
	ErrPinMismatch   = errors.New("module digest differs from its sha256 pin")
	ErrBadConfigMap  = errors.New("invalid policy ConfigMap")
	ErrNoWasmRuntime = errors.New("no WebAssembly runtime configured")
)

// Module is a loaded policy that holds resources.
type Module interface {
	plugin.Policy
	Close(ctx context.Context) error
}

// LoadFunc loads a module's bytes as the policy name.
type LoadFunc func(ctx context.Context, name string, module []byte) (Module, error)

// Options configure a Registry. All fields may be left zero.
type Options struct {
	// Namespace of the policy ConfigMaps; "" means DefaultNamespace.
	Namespace string
	// Default is the cluster default policy (policies.default): a policy
	// ConfigMap's name or "builtin:<name>"; "" means Fallback.
	Default string
	// Load loads WebAssembly modules; nil refuses ConfigMap policies.
	Load LoadFunc
	// MaxModuleSize caps a module; 0 means DefaultMaxModuleSize.
	MaxModuleSize int64
	// RetireAfter: 0 means DefaultRetireAfter.
	RetireAfter time.Duration
	// OnChange is called, without blocking, after policies changed.
	OnChange func()
	// LastGood, when set, keeps each policy's last good version on disk,
	// so that a registry started while a policy's ConfigMap is broken
	// (the daemon restarted) runs the version that last worked; nil
	// keeps it in memory only.
	LastGood *lastgood.Dir
}

// Registry resolves Services' policies and keeps policy ConfigMaps
// loaded. Resolve, Changed, HasSynced and SetDefault are safe for
// concurrent use.
type Registry struct {
	client kubernetes.Interface
	opts   Options
	log    *slog.Logger
	wake   chan struct{}

	mu      sync.Mutex
	def     string
	entries map[string]*entry
	pending map[string]*corev1.ConfigMap // nil: deleted
	changed map[string]bool
	synced  bool
}

// entry is one policy ConfigMap's loaded state.
type entry struct {
	resourceVersion string
	// digest is the digest of the module the ConfigMap holds now, ""
	// when it does not decode; err says why that content cannot be used.
	digest string
	params []byte
	err    error
	// run is what Resolve hands out: the ConfigMap's current version,
	// or, when err is set, the last good one (nil when there was none).
	run *version
	// stale is err with the version that keeps running named, when run
	// is an earlier version than the ConfigMap's.
	stale error
}

// version is one loaded version of a policy: its module with the
// parameters it came with. It is the plugin.Policy Resolve returns and
// says which version it is (plugin.Versioned).
type version struct {
	Module
	params []byte
	id     plugin.PolicyVersion
	// kept is set for a version read back from Options.LastGood.
	kept bool
}

// PolicyVersion returns the module's digest and the resourceVersion of
// the ConfigMap it was loaded from.
func (v *version) PolicyVersion() plugin.PolicyVersion { return v.id }

var _ plugin.Versioned = (*version)(nil)

// New returns a Registry over client; Run starts its watch.
func New(client kubernetes.Interface, opts Options, log *slog.Logger) *Registry {
	if opts.Namespace == "" {
		opts.Namespace = DefaultNamespace
	}
	if opts.MaxModuleSize <= 0 {
		opts.MaxModuleSize = DefaultMaxModuleSize
	}
	if opts.RetireAfter <= 0 {
		opts.RetireAfter = DefaultRetireAfter
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Registry{
		client:  client,
		opts:    opts,
		log:     log,
		wake:    make(chan struct{}, 1),
		def:     opts.Default,
		entries: make(map[string]*entry),
		pending: make(map[string]*corev1.ConfigMap),
		changed: make(map[string]bool),
	}
}

// Run watches the policy ConfigMaps and loads them until ctx is done;
// then it closes every module.
func (r *Registry) Run(ctx context.Context) {
	factory := informers.NewSharedInformerFactoryWithOptions(r.client, 0,
		informers.WithNamespace(r.opts.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = Label + "=true" }))
	inf := factory.Core().V1().ConfigMaps().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.record(obj, false) },
		UpdateFunc: func(_, obj any) { r.record(obj, false) },
		DeleteFunc: func(obj any) { r.record(obj, true) },
	})
	if err != nil { // only when the informer has stopped: cannot happen here
		r.log.Error("watch policy ConfigMaps", "err", err)
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	defer r.closeAll()
	// Load nothing before the list is complete, so that HasSynced means
	// every policy that existed at start has been tried.
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return
	}
	for {
		r.loadPending(ctx)
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		}
	}
}

// record is the informer's handler: it only notes the ConfigMap.
func (r *Registry) record(obj any, deleted bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, deleted = d.Obj, true
	}
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return
	}
	r.mu.Lock()
	if deleted {
		r.pending[cm.Name] = nil
	} else {
		r.pending[cm.Name] = cm
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// loadPending loads what the handlers recorded, off the informer's
// goroutine, and marks the policies whose outcome changed.
func (r *Registry) loadPending(ctx context.Context) {
	r.mu.Lock()
	pending := r.pending
	r.pending = make(map[string]*corev1.ConfigMap)
	r.mu.Unlock()

	var changed []string
	for _, name := range slices.Sorted(maps.Keys(pending)) {
		cm := pending[name]
		r.mu.Lock()
		old := r.entries[name]
		r.mu.Unlock()
		var next *entry
		if cm != nil {
			if old != nil && old.resourceVersion == cm.ResourceVersion && cm.ResourceVersion != "" {
				continue // a resync
			}
			next = r.load(ctx, cm, old)
		}
		r.mu.Lock()
		if next == nil {
			delete(r.entries, name)
		} else {
			r.entries[name] = next
		}
		r.mu.Unlock()
		if next == nil {
			r.forgetKept(name)
		}
		if m := runModule(old); m != nil && m != runModule(next) {
			r.retire(m)
		}
		if !sameOutcome(old, next) {
			changed = append(changed, name)
			switch {
			case next == nil:
				r.log.Info("policy deleted", "policy", name)
			case next.err != nil && next.run != nil:
				r.log.Warn("policy failed to load; keeping its last good version", "policy", name, "err", next.err, "running", next.run.id.Digest)
			case next.err != nil:
				r.log.Warn("policy failed to load", "policy", name, "err", next.err)
			default:
				r.log.Info("policy loaded", "policy", name, "sha256", next.digest)
			}
		}
	}
	r.mu.Lock()
	for _, name := range changed {
		r.changed[name] = true
	}
	becameSynced := !r.synced
	r.synced = true
	r.mu.Unlock()
	if becameSynced {
		r.pruneKept()
	}
	if (len(changed) > 0 || becameSynced) && r.opts.OnChange != nil {
		r.opts.OnChange()
	}
}

func sameOutcome(a, b *entry) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.digest == b.digest && bytes.Equal(a.params, b.params) && errString(a.err) == errString(b.err) && a.run == b.run
}

// runModule is the module e hands out, nil when none.
func runModule(e *entry) Module {
	if e == nil || e.run == nil {
		return nil
	}
	return e.run.Module
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// load decodes, checks and loads cm; it reuses old's module when the
// module's digest did not change, and old's version when neither the
// module nor the parameters did. When cm cannot be used, the entry keeps
// old's running version (the last good one), or, when this registry has
// none, the one kept on disk (Options.LastGood), with the error. A new
// good version is kept on disk.
func (r *Registry) load(ctx context.Context, cm *corev1.ConfigMap, old *entry) *entry {
	e := &entry{resourceVersion: cm.ResourceVersion}
	var last *version
	if old != nil {
		last = old.run
	}
	fail := func(err error) *entry {
		if last == nil {
			last = r.kept(ctx, cm.Name, e.digest)
		}
		e.err, e.run = err, last
		switch {
		case last != nil && last.kept:
			e.stale = fmt.Errorf("%w (running its last good version, sha256 %s, kept on this node's disk from revision %s, instead)",
				err, ShortDigest(last.id.Digest), last.id.Revision)
		case last != nil:
			e.stale = fmt.Errorf("%w (running its last good version, sha256 %s, instead)", err, ShortDigest(last.id.Digest))
		}
		return e
	}
	module, params, err := Decode(cm, r.opts.MaxModuleSize)
	e.params = params
	if err != nil {
		return fail(err)
	}
	e.digest = Digest(module)
	if last != nil && last.id.Digest == e.digest {
		if bytes.Equal(last.params, params) {
			e.run = last
		} else {
			e.run = &version{Module: last.Module, params: params, id: plugin.PolicyVersion{Digest: e.digest, Revision: cm.ResourceVersion}}
			r.keep(cm.Name, e.run, module)
		}
		return e
	}
	if r.opts.Load == nil {
		return fail(fmt.Errorf("policy %s: %w", cm.Name, ErrNoWasmRuntime))
	}
	m, err := r.opts.Load(ctx, cm.Name, module)
	if err != nil {
		return fail(err)
	}
	e.run = &version{Module: m, params: params, id: plugin.PolicyVersion{Digest: e.digest, Revision: cm.ResourceVersion}}
	r.keep(cm.Name, e.run, module)
	return e
}

// keep saves v, loaded from module, as name's last good version on disk.
// A failure is logged: the version runs all the same.
func (r *Registry) keep(name string, v *version, module []byte) {
	if r.opts.LastGood == nil {
		return
	}
	err := r.opts.LastGood.Save(name, lastgood.Version{Digest: v.id.Digest, Revision: v.id.Revision, Params: v.params, Module: module})
	if err != nil {
		r.log.Warn("keeping the policy's last good version on disk; it is kept in memory only", "policy", name, "err", err)
	}
}

// kept loads name's last good version from disk, for a policy that
// fails before any version of it loaded here: nil when there is none,
// when it is damaged (logged, and removed), when it is the failing
// module itself (failing: digest) or when it no longer loads.
func (r *Registry) kept(ctx context.Context, name, failing string) *version {
	if r.opts.LastGood == nil || r.opts.Load == nil {
		return nil
	}
	k, err := r.opts.LastGood.Load(name)
	switch {
	case errors.Is(err, lastgood.ErrNone):
		return nil
	case err != nil:
		r.log.Warn("ignoring the policy's last good version kept on disk", "policy", name, "err", err)
		if errors.Is(err, lastgood.ErrDamaged) {
			r.forgetKept(name)
		}
		return nil
	case k.Digest == failing:
		return nil
	}
	m, err := r.opts.Load(ctx, name, k.Module)
	if err != nil {
		r.log.Warn("the policy's last good version kept on disk does not load; ignoring it", "policy", name, "sha256", k.Digest, "err", err)
		return nil
	}
	var params []byte
	if len(k.Params) > 0 {
		params = k.Params
	}
	return &version{Module: m, params: params, id: plugin.PolicyVersion{Digest: k.Digest, Revision: k.Revision}, kept: true}
}

// forgetKept removes name's last good version from disk: its ConfigMap
// is gone.
func (r *Registry) forgetKept(name string) {
	if r.opts.LastGood == nil {
		return
	}
	if err := r.opts.LastGood.Remove(name); err != nil {
		r.log.Warn("removing the policy's last good version from disk", "policy", name, "err", err)
	}
}

// pruneKept removes the last good versions of the policies whose
// ConfigMap no longer exists (deleted while the daemon was down): it
// runs once the first list of ConfigMaps is loaded.
func (r *Registry) pruneKept() {
	if r.opts.LastGood == nil {
		return
	}
	names, err := r.opts.LastGood.Names()
	if err != nil {
		r.log.Warn("listing the policies' last good versions on disk", "err", err)
		return
	}
	r.mu.Lock()
	var gone []string
	for _, n := range names {
		if _, ok := r.entries[n]; !ok {
			gone = append(gone, n)
		}
	}
	r.mu.Unlock()
	for _, n := range gone {
		r.forgetKept(n)
	}
}

// ShortDigest is the first 12 hex digits of a digest, as yardctl shows it.
func ShortDigest(d string) string { return d[:min(len(d), 12)] }

// Decode returns a policy ConfigMap's uncompressed module and default
// parameters, checking the module against the sha256 pin.
func Decode(cm *corev1.ConfigMap, maxSize int64) (module, params []byte, err error) {
	name := cm.Namespace + "/" + cm.Name
	if p := cm.Data[KeyParams]; p != "" {
		if !json.Valid([]byte(p)) {
			return nil, nil, fmt.Errorf("%w %s: %s is not valid JSON", ErrBadConfigMap, name, KeyParams)
		}
		params = []byte(p)
	}
	plain, hasPlain := cm.BinaryData[KeyModule]
	gz, hasGz := cm.BinaryData[KeyModuleGzip]
	switch {
	case hasPlain && hasGz:
		return nil, params, fmt.Errorf("%w %s: both binaryData %s and %s are set", ErrBadConfigMap, name, KeyModule, KeyModuleGzip)
	case hasPlain:
		module = plain
	case hasGz:
		module, err = Gunzip(gz, maxSize)
		if err != nil {
			return nil, params, fmt.Errorf("%w %s: %s: %w", ErrBadConfigMap, name, KeyModuleGzip, err)
		}
	default:
		for _, k := range []string{KeyModule, KeyModuleGzip} {
			if _, ok := cm.Data[k]; ok {
				return nil, params, fmt.Errorf("%w %s: the module %s is under data, not binaryData (kubectl create configmap --from-file "+
					"puts a file that happens to be valid UTF-8 under data); rewrite the ConfigMap with "+
					"`yardctl policy apply FILE --name %s`, which moves it to binaryData", ErrBadConfigMap, name, k, cm.Name)
			}
		}
		return nil, params, fmt.Errorf("%w %s: no binaryData %s or %s", ErrBadConfigMap, name, KeyModule, KeyModuleGzip)
	}
	if int64(len(module)) > maxSize {
		return nil, params, fmt.Errorf("%w %s: module of %d bytes is over the %d byte limit", ErrBadConfigMap, name, len(module), maxSize)
	}
	if pin := strings.ToLower(strings.TrimSpace(cm.Data[KeyPin])); pin != "" {
		if d := Digest(module); d != pin {
			return nil, params, fmt.Errorf("%w %s: %w: module %s, pin %s", ErrBadConfigMap, name, ErrPinMismatch, d, pin)
		}
	}
	return module, params, nil
}

// Gunzip decompresses b, refusing output over maxSize bytes.
func Gunzip(b []byte, maxSize int64) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("gunzip: %w", err)
	}
	out, err := io.ReadAll(io.LimitReader(zr, maxSize+1))
	if err != nil {
		return nil, fmt.Errorf("gunzip: %w", err)
	}
	if int64(len(out)) > maxSize {
		return nil, fmt.Errorf("gunzip: decompressed module is over the %d byte limit", maxSize)
	}
	return out, nil
}

// Digest is the lowercase hex sha256 of an uncompressed module: the value
// of a pin, and the digest the wasm host compiles and caches by.
func Digest(module []byte) string { return wasm.Digest(module) }

// retire closes m after RetireAfter.
func (r *Registry) retire(m Module) {
	time.AfterFunc(r.opts.RetireAfter, func() { _ = m.Close(context.Background()) })
}

func (r *Registry) closeAll() {
	r.mu.Lock()
	entries := r.entries
	r.entries = make(map[string]*entry)
	r.mu.Unlock()
	for _, e := range entries {
		if m := runModule(e); m != nil {
			_ = m.Close(context.Background())
		}
	}
}

// HasSynced reports whether the ConfigMaps that existed at start have
// been loaded (or have failed to).
func (r *Registry) HasSynced() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.synced
}

// SetDefault changes the cluster default policy (a config reload). The
// Services that used the old default are re-evaluated.
func (r *Registry) SetDefault(ref string) {
	r.mu.Lock()
	old := r.effectiveDefault()
	r.def = ref
	now := r.effectiveDefault()
	if old != now {
		r.changed[old], r.changed[now] = true, true
	}
	r.mu.Unlock()
	if old != now && r.opts.OnChange != nil {
		r.opts.OnChange()
	}
}

func (r *Registry) effectiveDefault() string {
	if r.def == "" {
		return Fallback
	}
	return r.def
}

// Changed returns the names of the policies that changed since the
// previous call, sorted.
func (r *Registry) Changed() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.changed) == 0 {
		return nil
	}
	out := slices.Sorted(maps.Keys(r.changed))
	clear(r.changed)
	return out
}

// Resolve returns the policy svc uses, its name and its default
// parameters (a Service's switchyard.dev/policy-params replaces them; the
// caller applies it). name is set even when err is not nil. Before
// HasSynced, a ConfigMap policy not loaded yet fails with
// plugin.ErrPolicyLoading (the ConfigMaps load one by one, each
// resolving as soon as it has). A ConfigMap
// policy that fails after a good version was loaded resolves to that
// version, with its parameters, and the error saying so. The policy of a
// ConfigMap is a plugin.Versioned.
func (r *Registry) Resolve(svc *model.Service) (name string, p plugin.Policy, params []byte, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	name = svc.Policy
	if name == "" {
		name = r.effectiveDefault()
	}
	if b, ok := strings.CutPrefix(name, BuiltinPrefix); ok {
		p, found := builtin.Lookup(b)
		if !found {
			return name, nil, nil, fmt.Errorf("%w: no built-in policy %q (have %s)", ErrNotFound, b, strings.Join(builtin.Names(), ", "))
		}
		return name, p, nil, nil
	}
	e := r.entries[name]
	switch {
	case e == nil && !r.synced:
		return name, nil, nil, fmt.Errorf("policy %s: %w", name, plugin.ErrPolicyLoading)
	case e == nil:
		return name, nil, nil, fmt.Errorf("%w: no ConfigMap %s/%s labelled %s=true", ErrNotFound, r.opts.Namespace, name, Label)
	case e.err != nil && e.run != nil:
		return name, e.run, e.run.params, e.stale
	case e.err != nil:
		return name, nil, nil, e.err
	}
	return name, e.run, e.run.params, nil
}
