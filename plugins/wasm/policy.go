package wasm

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"

	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/plugins/wasm/abi"
)

// tickEvery is how many evaluations of an instance run between calls to
// its sy_on_tick.
const tickEvery = 256

// Policy is a loaded module run as a plugin.Policy. Evaluate is safe for
// concurrent use: each concurrent caller gets its own instance.
type Policy struct {
	rt     *Runtime
	name   string
	digest [sha256.Size]byte
	c      *compiled
	log    *guestLog

	// slots holds one token per instance that may exist; a caller holds a
	// token while it uses an instance.
	slots chan struct{}

	mu     sync.Mutex
	idle   []*instance
	closed bool
}

var _ plugin.Policy = (*Policy)(nil)

// instance is one guest instance with its reusable buffers. Only the
// caller holding it touches it.
type instance struct {
	mod    api.Module
	mem    api.Memory
	alloc  api.Function
	eval   api.Function
	tick   api.Function
	stderr *lineWriter
	calls  callLog

	bufPtr, bufCap uint32
	in             []byte
	stack          [2]uint64
	evals          int
}

func newPolicy(r *Runtime, name string, digest [sha256.Size]byte, c *compiled) *Policy {
	return &Policy{
		rt:     r,
		name:   name,
		digest: digest,
		c:      c,
		log:    &guestLog{policy: name, sink: r.cfg.Log, limiter: newLogLimiter(r.cfg.LogRate, r.cfg.LogBurst)},
		slots:  make(chan struct{}, r.cfg.MaxInstances),
	}
}

// Name returns the name the policy was loaded with.
func (p *Policy) Name() string { return p.name }

// Digest returns the module's sha256 digest in hex.
func (p *Policy) Digest() string { return fmt.Sprintf("%x", p.digest) }

// Close discards the policy's instances; evaluations in flight finish
// first. Evaluate fails with ErrClosed afterwards.
func (p *Policy) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, inst := range idle {
		_ = inst.mod.Close(ctx)
	}
	p.rt.release(ctx, p.digest)
	return nil
}

// Evaluate runs the guest on in under the configured deadline (or ctx's,
// when earlier). The error wraps one of ErrDeadline, ErrTrap,
// ErrDeclined (with the guest's last warning, if any), ErrInvalidOutput
// or ErrClosed; after any but a decline the instance is discarded.
func (p *Policy) Evaluate(ctx context.Context, in *plugin.PolicyInput) (plugin.PolicyResult, error) {
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return plugin.PolicyResult{}, fmt.Errorf("policy %q: wait for an instance: %w", p.name, ctx.Err())
	}
	defer func() { <-p.slots }()

	inst, err := p.get(ctx)
	if err != nil {
		return plugin.PolicyResult{}, fmt.Errorf("policy %q: %w", p.name, err)
	}
	res, keep, err := p.call(ctx, inst, in)
	if keep {
		p.put(inst)
	} else {
		_ = inst.mod.Close(context.Background())
	}
	if err != nil {
		return plugin.PolicyResult{}, fmt.Errorf("policy %q: %w", p.name, err)
	}
	return res, nil
}

// call runs one evaluation on inst and says whether inst may be reused.
func (p *Policy) call(ctx context.Context, inst *instance, in *plugin.PolicyInput) (plugin.PolicyResult, bool, error) {
	var err error
	inst.in, err = abi.Encode(inst.in, in)
	if err != nil {
		return plugin.PolicyResult{}, true, err
	}
	ctx, cancel := context.WithTimeout(context.WithValue(ctx, guestLogKey{}, &inst.calls), p.rt.cfg.Deadline)
	defer cancel()
	inst.stderr.takeFirst() // forget lines from earlier calls
	inst.calls.last = ""

	n := uint32(len(inst.in))
	if n > inst.bufCap {
		inst.stack[0] = api.EncodeU32(n)
		if err := inst.alloc.CallWithStack(ctx, inst.stack[:]); err != nil {
			return plugin.PolicyResult{}, false, p.callError(ctx, inst, abi.ExportAlloc, err)
		}
		ptr := api.DecodeU32(inst.stack[0])
		if ptr == 0 {
			return plugin.PolicyResult{}, false, fmt.Errorf("%w: %s(%d) returned 0", ErrTrap, abi.ExportAlloc, n)
		}
		inst.bufPtr, inst.bufCap = ptr, n
	}
	if !inst.mem.Write(inst.bufPtr, inst.in) {
		return plugin.PolicyResult{}, false, fmt.Errorf("%w: %s buffer %d+%d outside guest memory of %d bytes",
			ErrInvalidOutput, abi.ExportAlloc, inst.bufPtr, n, inst.mem.Size())
	}
	inst.stack[0], inst.stack[1] = api.EncodeU32(inst.bufPtr), api.EncodeU32(n)
	if err := inst.eval.CallWithStack(ctx, inst.stack[:]); err != nil {
		return plugin.PolicyResult{}, false, p.callError(ctx, inst, abi.ExportEvaluate, err)
	}
	ret := inst.stack[0]
	if ret == 0 {
		if inst.calls.last != "" {
			return plugin.PolicyResult{}, true, fmt.Errorf("%w: %s", ErrDeclined, inst.calls.last)
		}
		return plugin.PolicyResult{}, true, ErrDeclined
	}
	outPtr, outLen := uint32(ret>>32), uint32(ret)
	if max := abi.MaxOutputSize(len(in.Endpoints)); int64(outLen) > int64(max) {
		return plugin.PolicyResult{}, false, fmt.Errorf("%w: %d bytes, limit %d for %d endpoints", ErrInvalidOutput, outLen, max, len(in.Endpoints))
	}
	out, ok := inst.mem.Read(outPtr, outLen)
	if !ok {
		return plugin.PolicyResult{}, false, fmt.Errorf("%w: %d+%d outside guest memory of %d bytes", ErrInvalidOutput, outPtr, outLen, inst.mem.Size())
	}
	res, err := abi.Decode(out, len(in.Endpoints))
	if err != nil {
		return plugin.PolicyResult{}, false, err // an *abi.OutputError: ErrInvalidOutput
	}

	inst.evals++
	if inst.tick != nil && inst.evals%tickEvery == 0 {
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.rt.cfg.Deadline)
		defer cancel()
		if err := inst.tick.CallWithStack(tctx, inst.stack[:]); err != nil {
			// The result stands; only the instance is lost.
			return res, false, nil
		}
	}
	return res, true, nil
}

// callError classifies a failed guest call. ctx is the call's context.
func (p *Policy) callError(ctx context.Context, inst *instance, fn string, err error) error {
	var exit *sys.ExitError
	if errors.As(err, &exit) {
		switch exit.ExitCode() {
		case sys.ExitCodeDeadlineExceeded:
			return fmt.Errorf("%w: %s ran past its deadline (limit %v)", ErrDeadline, fn, p.rt.cfg.Deadline)
		case sys.ExitCodeContextCanceled:
			return fmt.Errorf("%s: %w", fn, context.Cause(ctx))
		}
	}
	if line := inst.stderr.takeFirst(); line != "" {
		return fmt.Errorf("%w: %s: %w (guest stderr: %q)", ErrTrap, fn, err, line)
	}
	return fmt.Errorf("%w: %s: %w", ErrTrap, fn, err)
}

// get returns an idle instance, or a new one.
func (p *Policy) get(ctx context.Context) (*instance, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	if n := len(p.idle); n > 0 {
		inst := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return inst, nil
	}
	p.mu.Unlock()
	inst, err := p.instantiate(ctx)
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed { // Close ran meanwhile and may have released the compilation
		if err == nil {
			_ = inst.mod.Close(context.Background())
		}
		return nil, ErrClosed
	}
	return inst, err
}

// put returns inst to the idle list, or closes it once the policy is.
func (p *Policy) put(inst *instance) {
	p.mu.Lock()
	if !p.closed {
		p.idle = append(p.idle, inst)
		inst = nil
	}
	p.mu.Unlock()
	if inst != nil {
		_ = inst.mod.Close(context.Background())
	}
}

func (p *Policy) instantiate(ctx context.Context) (*instance, error) {
	inst := &instance{calls: callLog{log: p.log}}
	ctx, cancel := context.WithTimeout(context.WithValue(ctx, guestLogKey{}, &inst.calls), p.rt.cfg.InstantiateDeadline)
	defer cancel()
	stderr := &lineWriter{log: p.log, level: slog.LevelWarn}
	cfg := wazero.NewModuleConfig().
		WithName("").
		WithSysNanotime().
		WithStdout(&lineWriter{log: p.log, level: slog.LevelInfo}).
		WithStderr(stderr).
		WithStartFunctions()
	if p.c.hasInit {
		cfg = cfg.WithStartFunctions(abi.ExportInit)
	}
	mod, err := p.c.rt.InstantiateModule(ctx, p.c.mod, cfg)
	if err != nil {
		var exit *sys.ExitError
		if errors.As(err, &exit) && exit.ExitCode() == sys.ExitCodeDeadlineExceeded {
			return nil, fmt.Errorf("%w: instantiate ran longer than %v", ErrDeadline, p.rt.cfg.InstantiateDeadline)
		}
		if line := stderr.takeFirst(); line != "" {
			return nil, fmt.Errorf("instantiate: %w (guest stderr: %q)", err, line)
		}
		return nil, fmt.Errorf("instantiate: %w", err)
	}
	inst.mod = mod
	inst.mem = mod.ExportedMemory(abi.ExportMemory)
	inst.alloc = mod.ExportedFunction(abi.ExportAlloc)
	inst.eval = mod.ExportedFunction(abi.ExportEvaluate)
	inst.stderr = stderr
	if p.c.hasTick {
		inst.tick = mod.ExportedFunction(abi.ExportOnTick)
	}
	return inst, nil
}
