package wasm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/switchyard-lb/switchyard/plugins/wasm/abi"
)

// Config configures a Runtime. The zero value is usable: every zero field
// takes the default named on it.
type Config struct {
	// CacheDir, when set, persists compiled code across restarts.
	CacheDir string
	// MemoryLimitPages caps each instance's linear memory in 64 KiB pages
	// (default 512: 32 MiB).
	MemoryLimitPages uint32
	// Deadline bounds each evaluation (default 250ms: a 1,000-endpoint Go
	// guest takes ~0.5ms, but on a loaded node the wall-clock tail reached
	// 100ms).
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

func (c Config) withDefaults() Config {
	if c.MemoryLimitPages == 0 {
		c.MemoryLimitPages = 512
	}
	if c.Deadline <= 0 {
		c.Deadline = 250 * time.Millisecond
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
	cfg Config
	rt  wazero.Runtime

	mu       sync.Mutex
	compiled map[[sha256.Size]byte]*compiled
}

// compiled is a module compiled once and shared by every Policy loaded
// from the same bytes.
type compiled struct {
	mod     wazero.CompiledModule
	refs    int
	hasInit bool
	hasTick bool
}

// NewRuntime returns a Runtime with the ABI's host modules instantiated.
func NewRuntime(ctx context.Context, cfg Config) (*Runtime, error) {
	cfg = cfg.withDefaults()
	rc := wazero.NewRuntimeConfigCompiler().
		WithMemoryLimitPages(cfg.MemoryLimitPages).
		WithCloseOnContextDone(true)
	if cfg.CacheDir != "" {
		cache, err := wazero.NewCompilationCacheWithDir(cfg.CacheDir)
		if err != nil {
			return nil, fmt.Errorf("open wasm compilation cache %s: %w", cfg.CacheDir, err)
		}
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
	return &Runtime{cfg: cfg, rt: rt, compiled: map[[sha256.Size]byte]*compiled{}}, nil
}

// Close releases the runtime and every policy loaded from it.
func (r *Runtime) Close(ctx context.Context) error {
	return r.rt.Close(ctx)
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
	cm, err := r.rt.CompileModule(ctx, module)
	if err != nil {
		return nil, fmt.Errorf("%w: compile: %w", ErrInvalidModule, err)
	}
	hasInit, hasTick, err := checkModule(cm)
	if err != nil {
		_ = cm.Close(ctx)
		return nil, fmt.Errorf("%w: %w", ErrInvalidModule, err)
	}
	c := &compiled{mod: cm, refs: 1, hasInit: hasInit, hasTick: hasTick}
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
var (
	// ErrInvalidModule: not WebAssembly, or not following ABI v1.
	ErrInvalidModule = errors.New("invalid policy module")
	// ErrDeadline: the guest ran past its deadline.
	ErrDeadline = errors.New("policy deadline exceeded")
	// ErrTrap: the guest trapped (a panic, an out-of-bounds access, out
	// of memory) or exited.
	ErrTrap = errors.New("policy trapped")
	// ErrDeclined: the guest returned no result (it should have logged
	// why).
	ErrDeclined = errors.New("policy declined")
	// ErrInvalidOutput: the guest's output broke the ABI; it also wraps
	// abi.ErrInvalidOutput when the layout was at fault.
	ErrInvalidOutput = errors.New("invalid policy output")
	// ErrClosed: the policy was closed.
	ErrClosed = errors.New("policy closed")
)
