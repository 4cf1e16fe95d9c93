package wasm

import (
	"context"
	"crypto/sha256"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/tetratelabs/wazero"

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
	// Load instantiates the Go guest once; its runtime's start passed the
	// default 1 s at load 30-40 (issue 9), so give it a failure bound only.
	r, err := NewRuntime(ctx, Config{CacheDir: filepath.Join(cache, "wazero"), Deadline: 250 * time.Millisecond, InstantiateDeadline: 2 * time.Minute})
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

// TestScanModuleMatchesCompiler checks the pre-compile scan against what
// wazero reports for the same module.
func TestScanModuleMatchesCompiler(t *testing.T) {
	root, _ := filepath.Abs("../..")
	module, err := wasmtest.BuildGo(root, filepath.Join(root, "plugins/wasm/testdata/guests/hostile"))
	if err != nil {
		t.Fatal(err)
	}
	imports, exports, ok := scanModule(module)
	if !ok {
		t.Fatal("scanModule() failed on a valid module")
	}
	ctx := context.Background()
	cache, _ := wasmtest.CacheDir()
	cc, err := wazero.NewCompilationCacheWithDir(filepath.Join(cache, "wazero"))
	if err != nil {
		t.Fatal(err)
	}
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler().WithCompilationCache(cc))
	defer rt.Close(ctx)
	cm, err := rt.CompileModule(ctx, module)
	if err != nil {
		t.Fatal(err)
	}
	var wantImports []importRef
	for _, f := range cm.ImportedFunctions() {
		mod, name, _ := f.Import()
		wantImports = append(wantImports, importRef{module: mod, name: name})
	}
	var wantExports []string
	for name := range cm.ExportedFunctions() {
		wantExports = append(wantExports, name)
	}
	slices.Sort(wantExports)
	slices.Sort(exports)
	if diff := cmp.Diff(wantImports, imports, cmp.AllowUnexported(importRef{})); diff != "" {
		t.Errorf("imports (-compiler +scan):\n%s", diff)
	}
	if diff := cmp.Diff(wantExports, exports); diff != "" {
		t.Errorf("exports (-compiler +scan):\n%s", diff)
	}
}

func TestCheckImports(t *testing.T) {
	tests := []struct {
		name    string
		imports []importRef
		want    string
	}{
		{"allowed", []importRef{{"sy_v1", "log", 0}, {"wasi_snapshot_preview1", "fd_write", 0}}, ""},
		{"other module", []importRef{{"env", "f", 0}}, "forbidden function import env.f: a policy may import only sy_v1.log and the WASI functions listed in ABI.md"},
		{"assemblyscript's abort", []importRef{{"env", "abort", 0}}, "forbidden function import env.abort: a policy may import only sy_v1.log and the WASI functions listed in ABI.md " +
			"(AssemblyScript's abort: compile with asc --use abort=, as yardctl policy build does)"},
		{"filesystem", []importRef{{"wasi_snapshot_preview1", "path_open", 0}}, "forbidden function import wasi_snapshot_preview1.path_open"},
		{"sockets", []importRef{{"wasi_snapshot_preview1", "sock_accept", 0}}, "forbidden function import wasi_snapshot_preview1.sock_accept"},
		{"memory", []importRef{{"env", "memory", 2}}, "forbidden memory import env.memory"},
		{"log as a global", []importRef{{"sy_v1", "log", 3}}, "forbidden global import sy_v1.log"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkImports(tt.imports)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if tt.want == "" && got != "" || tt.want != "" && (len(got) < len(tt.want) || got[:len(tt.want)] != tt.want) {
				t.Errorf("checkImports() = %q, want prefix %q", got, tt.want)
			}
		})
	}
}

// FuzzScanModule: the scanner never panics on hostile bytes.
func FuzzScanModule(f *testing.F) {
	f.Add([]byte("\x00asm\x01\x00\x00\x00"))
	f.Add([]byte("\x00asm\x01\x00\x00\x00\x02\x07\x01\x01a\x01b\x00\x00"))
	f.Add([]byte("\x00asm\x01\x00\x00\x00\x07\x05\x01\x01x\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		scanModule(b)
	})
}
