package wasm

import (
	"context"
	"crypto/sha256"
	"path/filepath"
	"testing"
	"time"

	"github.com/switchyard-lb/switchyard/plugins/wasm/wasmtest"
)

// TestCompileOncePerDigest loads the same bytes twice under different
// names: both share one compilation, released with the last policy.
func TestCompileOncePerDigest(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	module, err := wasmtest.BuildGo(root, filepath.Join(root, "plugins/wasm/testdata/guests/hostile"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cache, err := wasmtest.CacheDir()
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRuntime(ctx, Config{CacheDir: filepath.Join(cache, "wazero"), Deadline: 250 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	a, err := r.Load(ctx, "a", module)
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.Load(ctx, "b", module)
	if err != nil {
		t.Fatal(err)
	}
	refs := func() int {
		r.mu.Lock()
		defer r.mu.Unlock()
		if c := r.compiled[sha256.Sum256(module)]; c != nil {
			return c.refs
		}
		return 0
	}
	if got := refs(); got != 2 || len(r.compiled) != 1 {
		t.Errorf("after two loads: %d compilations, refs %d; want 1, 2", len(r.compiled), got)
	}
	a.Close(ctx)
	a.Close(ctx) // idempotent
	if got := refs(); got != 1 {
		t.Errorf("after one Close: refs %d, want 1", got)
	}
	b.Close(ctx)
	if got := refs(); got != 0 || len(r.compiled) != 0 {
		t.Errorf("after both Close: %d compilations, want 0", len(r.compiled))
	}
}
