package wasm_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/config"
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/plugins/wasm"
	"github.com/switchyard-lb/switchyard/plugins/wasm/abi"
	"github.com/switchyard-lb/switchyard/plugins/wasm/wasmtest"
	"github.com/switchyard-lb/switchyard/test/harness"
)

// guests holds the test modules built from testdata/guests by TestMain.
var guests = map[string][]byte{}

// compileCache is shared by the tests' runtimes, and kept across runs, so
// that each module is compiled once (a compile takes ~1s, ~30s under the
// race detector).
var compileCache string

func TestMain(m *testing.M) {
	root, err := filepath.Abs("../..")
	if err == nil {
		for _, name := range []string{"hostile", "abiv2", "forbidden"} {
			var b []byte
			b, err = wasmtest.BuildGo(root, filepath.Join(root, "plugins/wasm/testdata/guests", name))
			if err != nil {
				break
			}
			guests[name] = b
		}
	}
	if err == nil {
		compileCache, err = wasmtest.CacheDir()
		compileCache = filepath.Join(compileCache, "wazero")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "build test guests:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// generousDeadline is the tests' evaluation and instantiation deadline
// unless a test waits for one to pass: a loaded machine must not turn a
// healthy call into a deadline failure.
const generousDeadline = 2 * time.Minute

// newRuntime returns a Runtime for cfg, with the tests' compilation cache
// and generous deadlines where cfg sets none.
func newRuntime(t testing.TB, cfg wasm.Config) *wasm.Runtime {
	t.Helper()
	if cfg.CacheDir == "" {
		cfg.CacheDir = compileCache
	}
	if cfg.Deadline == 0 {
		cfg.Deadline = generousDeadline
	}
	if cfg.InstantiateDeadline == 0 {
		cfg.InstantiateDeadline = generousDeadline
	}
	r, err := wasm.NewRuntime(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	return r
}

func load(t testing.TB, r *wasm.Runtime, guest string) *wasm.Policy {
	t.Helper()
	p, err := r.Load(context.Background(), guest, guests[guest])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

func input(n int, params string) *plugin.PolicyInput {
	in := &plugin.PolicyInput{
		Service: &model.Service{Key: model.ServiceKey{Namespace: "ns", Name: "svc"}, Type: model.ClusterIP},
		Port:    model.ServicePort{Name: "http", Protocol: model.TCP, Port: 80},
		Node:    &model.Node{Name: "n1", Zone: "z1"},
		Now:     time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC),
		Params:  []byte(params),
	}
	for i := range n {
		in.Endpoints = append(in.Endpoints, plugin.PolicyEndpoint{Endpoint: model.Endpoint{
			Addr: netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), Port: 8080, Protocol: model.TCP,
			NodeName: fmt.Sprintf("n%d", i%3), Zone: fmt.Sprintf("z%d", i%2), Ready: true, Serving: true,
		}})
	}
	return in
}

func ones(n int) []uint32 {
	w := make([]uint32, n)
	for i := range w {
		w[i] = 1
	}
	return w
}

func TestEvaluate(t *testing.T) {
	p := load(t, newRuntime(t, wasm.Config{}), "hostile")
	for _, n := range []int{0, 1, 3, 1000, 3} { // shrinking after growing reuses the buffer
		got, err := p.Evaluate(context.Background(), input(n, ""))
		if err != nil {
			t.Fatalf("%d endpoints: %v", n, err)
		}
		want := plugin.PolicyResult{Weights: ones(n)}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%d endpoints (-want +got):\n%s", n, diff)
		}
	}
	if p.Name() != "hostile" || p.Digest() != wasm.Digest(guests["hostile"]) {
		t.Errorf("Name, Digest = %q, %q", p.Name(), p.Digest())
	}
}

// TestHostileCalls runs each misbehaviour on one policy with a single
// instance, then a healthy call on the same policy: the failure must be
// reported clearly and leave nothing behind.
func TestHostileCalls(t *testing.T) {
	// The looping guest runs into the deadline; the others must not, on
	// a loaded machine either.
	r := newRuntime(t, wasm.Config{Deadline: 10 * time.Second, MemoryLimitPages: 128, MaxInstances: 1})
	p := load(t, r, "hostile")
	tests := []struct {
		mode    string
		wantErr error
		wantMsg string
	}{
		{"loop", wasm.ErrDeadline, "sy_evaluate ran past its deadline (limit 10s)"},
		{"panic", wasm.ErrTrap, `guest stderr: "panic: policy bug"`},
		{"oom", wasm.ErrTrap, "out of memory"},
		{"decline", wasm.ErrDeclined, "policy declined: cannot decide"},
		{"garbage", abi.ErrInvalidOutput, "ABI major version 26740, want 1"},
		{"oversize", wasm.ErrInvalidOutput, "1048576 bytes, limit 65548 for 3 endpoints"},
		{"outside", wasm.ErrInvalidOutput, "outside guest memory"},
		{"badversion", abi.ErrInvalidOutput, "ABI major version 2, want 1"},
		{"count", abi.ErrInvalidOutput, "4 weights for 3 endpoints"},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			_, err := p.Evaluate(context.Background(), input(3, tt.mode))
			if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("Evaluate(%s) error = %v, want %v containing %q", tt.mode, err, tt.wantErr, tt.wantMsg)
			}
			if err != nil && !strings.HasPrefix(err.Error(), `policy "hostile": `) {
				t.Errorf("error %q does not name the policy", err)
			}
			if errors.Is(err, abi.ErrInvalidOutput) && !errors.Is(err, wasm.ErrInvalidOutput) {
				t.Errorf("Evaluate(%s) error %v: an invalid layout must also be wasm.ErrInvalidOutput", tt.mode, err)
			}
			if n := strings.Count(fmt.Sprint(err), "invalid policy output"); n > 1 {
				t.Errorf("Evaluate(%s) error %q says invalid policy output %d times", tt.mode, err, n)
			}
			got, err := p.Evaluate(context.Background(), input(3, ""))
			if err != nil {
				t.Fatalf("healthy call after %s: %v", tt.mode, err)
			}
			if diff := cmp.Diff(ones(3), got.Weights); diff != "" {
				t.Errorf("healthy call after %s (-want +got):\n%s", tt.mode, diff)
			}
		})
	}
}

func TestLoadRefused(t *testing.T) {
	tests := []struct {
		name    string
		module  []byte
		cfg     wasm.Config
		wantErr error
		wantMsg string
	}{
		{"garbage bytes", []byte("#!/bin/sh\nrm -rf /\n"), wasm.Config{}, wasm.ErrInvalidModule, "compile: invalid magic number"},
		{"empty", nil, wasm.Config{}, wasm.ErrInvalidModule, "compile:"},
		{"truncated", guests["hostile"][:4096], wasm.Config{}, wasm.ErrInvalidModule, "compile:"},
		{"forbidden import", guests["forbidden"], wasm.Config{}, wasm.ErrInvalidModule, "forbidden function import env.exfiltrate"},
		{"wrong ABI version", guests["abiv2"], wasm.Config{}, wasm.ErrInvalidModule, "module is built for ABI v2; this host supports v1"},
		{"memory cap below the module's minimum", guests["hostile"], wasm.Config{MemoryLimitPages: 8}, wasm.ErrInvalidModule, "min 32 pages (2 Mi) over limit of 8 pages"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRuntime(t, tt.cfg)
			p, err := r.Load(context.Background(), "bad", tt.module)
			if err == nil {
				p.Close(context.Background())
				t.Fatal("Load() succeeded")
			}
			if (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) || !strings.Contains(err.Error(), tt.wantMsg) ||
				!strings.HasPrefix(err.Error(), `load policy "bad": `) {
				t.Errorf("Load() error = %v, want %v containing %q", err, tt.wantErr, tt.wantMsg)
			}
			if tt.cfg.MemoryLimitPages != 0 {
				return
			}
			// The runtime still loads and runs a good module.
			good := load(t, r, "hostile")
			if _, err := good.Evaluate(context.Background(), input(2, "")); err != nil {
				t.Errorf("good module after a refused one: %v", err)
			}
		})
	}
}

func TestGuestLog(t *testing.T) {
	var sink harness.List[wasm.LogRecord]
	// A rate so low that no token refills during the test: exactly the
	// burst passes.
	r := newRuntime(t, wasm.Config{Log: sink.Add, LogRate: 1e-9, LogBurst: 3})
	p := load(t, r, "hostile")

	if _, err := p.Evaluate(context.Background(), input(1, "log")); err != nil {
		t.Fatal(err)
	}
	want := []wasm.LogRecord{
		{Policy: "hostile", Level: slog.LevelWarn, Message: "noisy"},
		{Policy: "hostile", Level: slog.LevelWarn, Message: "noisy"},
		{Policy: "hostile", Level: slog.LevelWarn, Message: "noisy"},
	}
	if diff := cmp.Diff(want, sink.Take()); diff != "" {
		t.Errorf("rate-limited log (-want +got):\n%s", diff)
	}

	r2 := newRuntime(t, wasm.Config{Log: sink.Add})
	p2 := load(t, r2, "hostile")
	if _, err := p2.Evaluate(context.Background(), input(1, "stderr")); err != nil {
		t.Fatal(err)
	}
	if _, err := p2.Evaluate(context.Background(), input(1, "decline")); !errors.Is(err, wasm.ErrDeclined) {
		t.Fatalf("decline: %v", err)
	}
	want = []wasm.LogRecord{
		{Policy: "hostile", Level: slog.LevelWarn, Message: "hello from stderr"},
		{Policy: "hostile", Level: slog.LevelWarn, Message: "cannot decide"},
	}
	if diff := cmp.Diff(want, sink.Take()); diff != "" {
		t.Errorf("stderr and log (-want +got):\n%s", diff)
	}
}

func TestConcurrentEvaluate(t *testing.T) {
	// A generous deadline: under the race detector a guest panic's
	// printing alone can take tens of milliseconds.
	p := load(t, newRuntime(t, wasm.Config{MaxInstances: 2, Deadline: 10 * time.Second}), "hostile")
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 40 {
				n := 1 + (g*40+i)%17
				mode := ""
				if i%10 == 9 {
					mode = "panic" // recycled instances must not disturb the others
				}
				got, err := p.Evaluate(context.Background(), input(n, mode))
				switch {
				case mode == "panic" && !errors.Is(err, wasm.ErrTrap):
					errs <- fmt.Errorf("panic call: %v", err)
					return
				case mode == "" && err != nil:
					errs <- err
					return
				case mode == "" && !cmp.Equal(got.Weights, ones(n)):
					errs <- fmt.Errorf("%d endpoints: weights %v", n, got.Weights)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestOnTick: sy_on_tick runs once every 256 evaluations of an instance.
func TestOnTick(t *testing.T) {
	p := load(t, newRuntime(t, wasm.Config{MaxInstances: 1}), "hostile")
	var got []uint32
	for i := range 2*256 + 1 {
		mode := ""
		if i%256 == 0 {
			mode = "ticks"
		}
		res, err := p.Evaluate(context.Background(), input(1, mode))
		if err != nil {
			t.Fatal(err)
		}
		if mode == "ticks" {
			got = append(got, res.Weights[0])
		}
	}
	if diff := cmp.Diff([]uint32{0, 1, 2}, got); diff != "" {
		t.Errorf("ticks seen after 0, 256 and 512 evaluations (-want +got):\n%s", diff)
	}
}

func TestEvaluateContext(t *testing.T) {
	p := load(t, newRuntime(t, wasm.Config{MaxInstances: 1}), "hostile")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.Evaluate(ctx, input(1, "")); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v, want context.Canceled", err)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Evaluate(context.Background(), input(1, "")); !errors.Is(err, wasm.ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
}

// TestCloseWhileEvaluating: Close during evaluations lets them finish or
// fail with ErrClosed, and nothing else (run with -race).
func TestCloseWhileEvaluating(t *testing.T) {
	r := newRuntime(t, wasm.Config{MaxInstances: 3})
	p, err := r.Load(context.Background(), "hostile", guests["hostile"])
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	started := make(chan struct{}, 4)
	for range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				_, err := p.Evaluate(context.Background(), input(5, ""))
				if i == 0 {
					started <- struct{}{}
				}
				if errors.Is(err, wasm.ErrClosed) {
					return
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for range 4 {
		<-started
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestCompilationCacheDir(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("compiles a module cold: ~1s, ~30s under the race detector (and nothing here races)")
	}
	dir := t.TempDir()
	r := newRuntime(t, wasm.Config{CacheDir: dir})
	p := load(t, r, "hostile")
	if _, err := p.Evaluate(context.Background(), input(1, "")); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		t.Errorf("cache dir after a load: %v entries, err %v; want some", len(entries), err)
	}
	// A second runtime on the same directory loads from it.
	p2 := load(t, newRuntime(t, wasm.Config{CacheDir: dir}), "hostile")
	if _, err := p2.Evaluate(context.Background(), input(1, "")); err != nil {
		t.Fatal(err)
	}
}

func BenchmarkEvaluate(b *testing.B) {
	for _, n := range []int{50, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			p := load(b, newRuntime(b, wasm.Config{}), "hostile")
			in := input(n, "")
			ctx := context.Background()
			for b.Loop() {
				if _, err := p.Evaluate(ctx, in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestErrorsNameTheirFailureReason checks that the control loop, which
// knows only core/plugin, tells this host's failures apart.
func TestErrorsNameTheirFailureReason(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{wasm.ErrDeadline, plugin.FailureDeadline},
		{wasm.ErrTrap, plugin.FailureTrap},
		{wasm.ErrDeclined, plugin.FailureDeclined},
		{wasm.ErrInvalidOutput, plugin.FailureInvalidOutput},
		{wasm.ErrInvalidModule, plugin.FailureLoad},
		{wasm.ErrClosed, plugin.FailureLoad},
	} {
		err := fmt.Errorf("port http/TCP: %w: details", tc.err)
		if got := plugin.FailureReason(err); got != tc.want {
			t.Errorf("FailureReason(%v) = %q, want %q", err, got, tc.want)
		}
		if !errors.Is(err, tc.err) {
			t.Errorf("%v is not %v", err, tc.err)
		}
	}
	if errors.Is(wasm.ErrClosed, wasm.ErrInvalidModule) {
		t.Error("ErrClosed is ErrInvalidModule")
	}
}

// The host's default deadline is the daemon's, so yardctl and a host built
// with a zero Config measure what the daemon enforces.
func TestDefaultDeadlineIsTheDaemons(t *testing.T) {
	if wasm.DefaultDeadline != config.DefaultEvaluationDeadline {
		t.Errorf("wasm.DefaultDeadline %v, config.DefaultEvaluationDeadline %v: keep them equal", wasm.DefaultDeadline, config.DefaultEvaluationDeadline)
	}
}

// TestCallsRunInParallel proves that nothing serialises guest calls: as
// many calls as the policy has instances are inside the guest at once.
// Each call's guest logs (mode "log"), and the log sink, which guest calls
// reach from inside sy_evaluate, waits until that many are inside it.
func TestCallsRunInParallel(t *testing.T) {
	const callers = 4
	const wait = 30 * time.Second // only reached when the calls do not overlap
	var (
		mu      sync.Mutex
		inside  int
		most    int
		all     = make(chan struct{})
		release sync.Once
	)
	waitCtx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	sink := func(wasm.LogRecord) {
		mu.Lock()
		inside++
		most = max(most, inside)
		if inside == callers {
			release.Do(func() { close(all) })
		}
		mu.Unlock()
		select {
		case <-all:
		case <-waitCtx.Done():
		}
		mu.Lock()
		inside--
		mu.Unlock()
	}
	r := newRuntime(t, wasm.Config{Log: sink, LogBurst: 1000, MaxInstances: callers, Deadline: 2 * wait})
	p := load(t, r, "hostile")
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for range callers {
		wg.Go(func() {
			if _, err := p.Evaluate(context.Background(), input(3, "log")); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	select {
	case <-all:
	default:
		t.Errorf("at most %d of %d calls were inside the guest at once", most, callers)
	}
}
