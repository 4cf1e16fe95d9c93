package wasm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/plugins/wasm/abi"
)

// Config configures a Runtime. The zero value is usable: every zero field
// takes the default named on it.
type Config struct {
	// CacheDir, when set, persists compiled code across restarts. NewRuntime
	// creates it and fails with ErrCacheDir when it cannot be created or
	// written. When the cache fails a compilation later, an entry it
	// cannot decode empties the cache, and a compilation it still fails
	// (one it cannot store) is done without it.
	CacheDir string
	// CacheFault, when set, is told (wrapping ErrCacheDir) each time the
	// cache failed a compilation. It is called from Load, with the
	// Runtime's lock held: it must not call the Runtime.
	CacheFault func(error)
	// MemoryLimitPages caps each instance's linear memory in 64 KiB pages
	// (default 512: 32 MiB).
	MemoryLimitPages uint32
	// Deadline bounds each evaluation and each sy_on_tick, in wall-clock
	// time (default DefaultDeadline).
	Deadline time.Duration
	// InstantiateDeadline bounds creating an instance, its _initialize
	// included (default 1s: Go guests need milliseconds).
	InstantiateDeadline time.Duration
	// MaxInstances bounds the instances of one policy, hence its
	// concurrent evaluations (default 4).
	MaxInstances int
	// Log receives guest log lines; nil drops them. It is called from
	// evaluating goroutines, possibly concurrently, and must not block.
	Log func(LogRecord)
	// LogRate and LogBurst rate-limit guest lines per policy (default 10
	// lines per second, burst 20).
	LogRate  float64
	LogBurst int
}

// DefaultDeadline is the default evaluation deadline: the daemon's
// policies.evaluationDeadline default (core/config.DefaultEvaluationDeadline;
// a test keeps them equal), which yardctl's policy commands use too. A Go
// guest evaluates 1,000 endpoints in ~0.5 ms; the rest is room for a
// loaded node's wall-clock tail.
const DefaultDeadline = 50 * time.Millisecond

func (c Config) withDefaults() Config {
	if c.MemoryLimitPages == 0 {
		c.MemoryLimitPages = 512
	}
	if c.Deadline <= 0 {
		c.Deadline = DefaultDeadline
	}
	if c.InstantiateDeadline <= 0 {
		c.InstantiateDeadline = time.Second
	}
	if c.MaxInstances <= 0 {
		c.MaxInstances = 4
	}
	if c.LogRate <= 0 {
		c.LogRate = 10
	}
	if c.LogBurst <= 0 {
		c.LogBurst = 20
	}
	return c
}

// Runtime loads policy modules. It is safe for concurrent use.
type Runtime struct {
	cfg   Config
	rt    wazero.Runtime
	cache wazero.CompilationCache // nil without Config.CacheDir

	mu       sync.Mutex
	compiled map[[sha256.Size]byte]*compiled
	// plain is a runtime without the cache, made when the cache first
	// fails a compilation; the modules compiled then run in it.
	plain wazero.Runtime
}

// cacheFault reports whether a compilation failed because of the
// compilation cache rather than the module: wazero returns the file
// cache's I/O errors, and its own "compilationcache:" errors for an
// entry it cannot decode, as they are.
func cacheFault(err error) bool {
	var pathErr *fs.PathError
	return errors.As(err, &pathErr) || strings.HasPrefix(err.Error(), "compilationcache:")
}

// compiled is a module compiled once and shared by every Policy loaded
// from the same bytes.
type compiled struct {
	rt      wazero.Runtime // the runtime mod was compiled in, which runs its instances
	mod     wazero.CompiledModule
	refs    int
	hasInit bool
	hasTick bool
}

// NewRuntime returns a Runtime with the ABI's host modules instantiated.
func NewRuntime(ctx context.Context, cfg Config) (*Runtime, error) {
	cfg = cfg.withDefaults()
	var cache wazero.CompilationCache
	if cfg.CacheDir != "" {
		var err error
		cache, err = wazero.NewCompilationCacheWithDir(cfg.CacheDir)
		if err == nil {
			err = checkCacheDir(cfg.CacheDir)
		}
		if err != nil {
			if cache != nil {
				_ = cache.Close(ctx)
			}
			return nil, fmt.Errorf("%w %s: %w", ErrCacheDir, cfg.CacheDir, err)
		}
	}
	rt, err := newWazero(ctx, cfg, cache)
	if err != nil {
		if cache != nil {
			_ = cache.Close(ctx)
		}
		return nil, err
	}
	return &Runtime{cfg: cfg, rt: rt, cache: cache, compiled: map[[sha256.Size]byte]*compiled{}}, nil
}

// newWazero returns a wazero runtime for cfg, with cache when not nil,
// and the ABI's host modules instantiated.
func newWazero(ctx context.Context, cfg Config, cache wazero.CompilationCache) (wazero.Runtime, error) {
	// The compiler where the CPU supports it (amd64 needs SSE4.1 and
	// POPCNT: generated code on a CPU without them dies of SIGILL, as
	// qemu's default qemu64 model showed), the interpreter elsewhere.
	rc := wazero.NewRuntimeConfig().
		WithMemoryLimitPages(cfg.MemoryLimitPages).
		WithCloseOnContextDone(true)
	if cache != nil {
		rc = rc.WithCompilationCache(cache)
	}
	rt := wazero.NewRuntimeWithConfig(ctx, rc)
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		_ = rt.Close(ctx)
		return nil, fmt.Errorf("instantiate WASI host module: %w", err)
	}
	_, err := rt.NewHostModuleBuilder(abi.ImportModule).
		NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(hostLog), []api.ValueType{api.ValueTypeI32, api.ValueTypeI32, api.ValueTypeI32}, nil).
		WithParameterNames("level", "ptr", "len").
		Export(abi.ImportLog).
		Instantiate(ctx)
	if err != nil {
		_ = rt.Close(ctx)
		return nil, fmt.Errorf("instantiate %s host module: %w", abi.ImportModule, err)
	}
	return rt, nil
}

// checkCacheDir makes sure compiled code can be stored in dir. wazero
// creates dir and a subdirectory per wazero version, GOARCH and GOOS,
// but only checks that they exist: a compilation whose result it then
// cannot write fails, so an unwritable cache would fail every policy.
func checkCacheDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	dirs := []string{dir}
	for _, e := range entries {
		if sub := filepath.Join(dir, e.Name()); strings.HasPrefix(e.Name(), "wazero-") {
			if st, err := os.Stat(sub); err == nil && st.IsDir() { // follows links
				dirs = append(dirs, sub)
			}
		}
	}
	for _, d := range dirs {
		f, err := os.CreateTemp(d, ".switchyard-probe-*")
		if err != nil {
			return fmt.Errorf("not writable: %w", err)
		}
		_ = f.Close()
		if err := os.Remove(f.Name()); err != nil {
			return fmt.Errorf("not writable: %w", err)
		}
	}
	return nil
}

// clearCacheDir removes the entries of the cache directory dir, keeping
// the directories wazero made.
func clearCacheDir(dir string) error {
	subs, err := filepath.Glob(filepath.Join(dir, "wazero-*", "*"))
	if err != nil {
		return err
	}
	var errs []error
	for _, f := range subs {
		if st, err := os.Lstat(f); err == nil && st.Mode().IsRegular() {
			errs = append(errs, os.Remove(f))
		}
	}
	return errors.Join(errs...)
}

// Close releases the runtime and every policy loaded from it.
func (r *Runtime) Close(ctx context.Context) error {
	err := r.rt.Close(ctx)
	r.mu.Lock()
	plain := r.plain
	r.mu.Unlock()
	if plain != nil {
		err = errors.Join(err, plain.Close(ctx))
	}
	if r.cache != nil {
		// The cache holds the compiled code in memory too.
		err = errors.Join(err, r.cache.Close(ctx))
	}
	return err
}

// Digest returns the sha256 digest by which modules are identified, in
// hex.
func Digest(module []byte) string {
	d := sha256.Sum256(module)
	return hex.EncodeToString(d[:])
}

// Load compiles module (or reuses the compilation of identical bytes),
// checks it against the ABI, instantiates it once to prove it starts, and
// returns it as a policy named name. Close the policy when done.
func (r *Runtime) Load(ctx context.Context, name string, module []byte) (*Policy, error) {
	digest := sha256.Sum256(module)
	c, err := r.acquire(ctx, digest, module)
	if err != nil {
		return nil, fmt.Errorf("load policy %q: %w", name, err)
	}
	p := newPolicy(r, name, digest, c)
	inst, err := p.instantiate(ctx)
	if err != nil {
		r.release(ctx, digest)
		return nil, fmt.Errorf("load policy %q: %w", name, err)
	}
	p.put(inst)
	return p, nil
}

func (r *Runtime) acquire(ctx context.Context, digest [sha256.Size]byte, module []byte) (*compiled, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.compiled[digest]; ok {
		c.refs++
		return c, nil
	}
	if imports, exports, ok := scanModule(module); ok {
		err := checkImports(imports)
		if err == nil {
			err = checkMarker(exports)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidModule, err)
		}
	}
	rt := r.rt
	cm, err := rt.CompileModule(ctx, module)
	if err != nil && r.cache != nil && cacheFault(err) {
		if r.cfg.CacheFault != nil {
			r.cfg.CacheFault(fmt.Errorf("%w %s: %w", ErrCacheDir, r.cfg.CacheDir, err))
		}
		// An entry wazero cannot decode fails the compilation of its
		// module at every start: empty the cache and compile again.
		if strings.HasPrefix(err.Error(), "compilationcache:") && clearCacheDir(r.cfg.CacheDir) == nil {
			cm, err = rt.CompileModule(ctx, module)
		}
		// A cache that still fails (it cannot be written any more, say):
		// compile in a runtime without it.
		if err != nil && cacheFault(err) {
			if r.plain == nil {
				plain, perr := newWazero(ctx, r.cfg, nil)
				if perr != nil {
					return nil, fmt.Errorf("compile without the cache, which failed (%w): %w", err, perr)
				}
				r.plain = plain
			}
			rt = r.plain
			cm, err = rt.CompileModule(ctx, module)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: compile: %w", ErrInvalidModule, err)
	}
	hasInit, hasTick, err := checkModule(cm)
	if err != nil {
		_ = cm.Close(ctx)
		return nil, fmt.Errorf("%w: %w", ErrInvalidModule, err)
	}
	c := &compiled{rt: rt, mod: cm, refs: 1, hasInit: hasInit, hasTick: hasTick}
	r.compiled[digest] = c
	return c, nil
}

func (r *Runtime) release(ctx context.Context, digest [sha256.Size]byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.compiled[digest]
	if c == nil {
		return
	}
	if c.refs--; c.refs == 0 {
		delete(r.compiled, digest)
		_ = c.mod.Close(ctx)
	}
}

// Errors a policy's load or evaluation wraps, for metrics and events.
// Those of an evaluation are core/plugin's, so that the control loop
// tells them apart (plugin.FailureReason) without knowing this package.
var (
	// ErrCacheDir: Config.CacheDir cannot be created or written; a
	// Runtime without a cache still works.
	ErrCacheDir = errors.New("unusable wasm compilation cache directory")
	// ErrInvalidModule: not WebAssembly, or not following ABI v1. It is
	// a plugin.ErrPolicyUnusable.
	ErrInvalidModule error = unusable("invalid policy module")
	// ErrDeadline: the guest ran past its deadline.
	ErrDeadline = plugin.ErrPolicyDeadline
	// ErrTrap: the guest trapped (a panic, an out-of-bounds access, out
	// of memory) or exited.
	ErrTrap = plugin.ErrPolicyTrap
	// ErrDeclined: the guest returned no result (it should have logged
	// why).
	ErrDeclined = plugin.ErrPolicyDeclined
	// ErrInvalidOutput: the guest's output broke the ABI; it also wraps
	// abi.ErrInvalidOutput when the layout was at fault.
	ErrInvalidOutput = plugin.ErrPolicyInvalidOutput
	// ErrClosed: the policy was closed. It is a plugin.ErrPolicyUnusable.
	ErrClosed error = unusable("policy closed")
)

// unusable is an error of a policy that cannot run at all: errors.Is
// matches it with plugin.ErrPolicyUnusable.
type unusable string

func (e unusable) Error() string { return string(e) }

func (e unusable) Is(target error) bool { return target == plugin.ErrPolicyUnusable }
