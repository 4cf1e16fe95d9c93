package wasm_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/plugins/wasm"
	"github.com/switchyard-lb/switchyard/plugins/wasm/abi"
	"github.com/switchyard-lb/switchyard/test/harness"
)

// tinyModule is the smallest module ABI v1 accepts, assembled by hand so
// that it compiles in milliseconds even under the race detector: one page
// of memory, the marker, sy_alloc returning 128*at (at below 64, so that
// modules of different at differ) and sy_evaluate declining (returning 0).
func tinyModule(at byte) []byte {
	vec := func(items ...[]byte) []byte {
		out := []byte{byte(len(items))}
		for _, it := range items {
			out = append(out, it...)
		}
		return out
	}
	name := func(s string) []byte { return append([]byte{byte(len(s))}, s...) }
	section := func(id byte, content []byte) []byte {
		return append([]byte{id, byte(len(content))}, content...)
	}
	body := func(code ...byte) []byte {
		return append([]byte{byte(len(code) + 1), 0x00}, code...) // size, no locals, code
	}
	const i32, i64, funcType, end = 0x7f, 0x7e, 0x60, 0x0b
	m := []byte("\x00asm\x01\x00\x00\x00")
	m = append(m, section(1, vec( // types
		[]byte{funcType, 0, 0},                // () -> ()
		[]byte{funcType, 1, i32, 1, i32},      // (i32) -> i32
		[]byte{funcType, 2, i32, i32, 1, i64}, // (i32, i32) -> i64
	))...)
	m = append(m, section(3, vec([]byte{0}, []byte{1}, []byte{2}))...) // functions' types
	m = append(m, section(5, vec([]byte{0x00, 1}))...)                 // memory: min 1 page
	m = append(m, section(7, vec(                                      // exports: name, kind, index
		append(name(abi.ExportMemory), 2, 0),
		append(name(abi.ExportMarker), 0, 0),
		append(name(abi.ExportAlloc), 0, 1),
		append(name(abi.ExportEvaluate), 0, 2),
	))...)
	m = append(m, section(10, vec( // code
		body(end),
		body(0x41, 0x80, at, end), // i32.const 128*at
		body(0x42, 0x00, end),     // i64.const 0
	))...)
	return m
}

// cacheFiles returns the files under dir, by path, with their inode
// numbers: wazero writes an entry to a temporary file it then renames, so
// an entry written again has a new inode.
func cacheFiles(t *testing.T, dir string) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		out[rel] = info.Sys().(*syscall.Stat_t).Ino
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// loadTiny loads tinyModule(at) in r and checks that it runs.
func loadTiny(r *wasm.Runtime, at byte) error {
	ctx := context.Background()
	p, err := r.Load(ctx, "tiny", tinyModule(at))
	if err != nil {
		return err
	}
	defer p.Close(ctx)
	if _, err := p.Evaluate(ctx, input(2, "")); !errors.Is(err, wasm.ErrDeclined) {
		return fmt.Errorf("evaluate: %w, want the tiny module's decline", err)
	}
	return nil
}

// TestCacheDirReused loads a module in one runtime, which stores its
// compiled code in the cache directory, then in a second runtime on the
// same directory, which must load it from there: it starts the module
// and writes nothing to the cache. A third runtime finds the entry
// damaged: it reports the fault, and the load still works and writes a
// good entry in its place, for the next start.
func TestCacheDirReused(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "not", "yet", "there")
	var f harness.List[error] // what Config.CacheFault is told
	load := func() error {
		r, err := wasm.NewRuntime(ctx, wasm.Config{CacheDir: dir, CacheFault: f.Add, Deadline: generousDeadline})
		if err != nil {
			return err
		}
		defer r.Close(ctx)
		return loadTiny(r, 8)
	}
	if err := load(); err != nil {
		t.Fatal(err)
	}
	first := cacheFiles(t, dir)
	if len(first) != 1 {
		t.Fatalf("cache after the first runtime holds %v, want one compiled module", first)
	}
	if err := load(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(first, cacheFiles(t, dir)); diff != "" {
		t.Errorf("the second runtime wrote to the cache, so it compiled again (-first +second):\n%s", diff)
	}
	if errs := f.Take(); len(errs) != 0 {
		t.Errorf("cache faults on a good cache: %v", errs)
	}

	path := filepath.Join(dir, slices.Collect(maps.Keys(first))[0])
	if err := os.WriteFile(path, []byte("damaged"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := load(); err != nil {
		t.Fatalf("load over a damaged entry: %v", err)
	}
	if errs := f.Take(); len(errs) != 1 || !errors.Is(errs[0], wasm.ErrCacheDir) || !strings.Contains(errs[0].Error(), "compilationcache") {
		t.Errorf("faults reported for a damaged entry = %v, want one ErrCacheDir with wazero's compilationcache error", errs)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) == "damaged" {
		t.Errorf("the damaged entry was not replaced (err %v)", err)
	}
}

// TestCacheDirFailsLater: a cache directory that stops being writable
// after the runtime started fails the compilations that must store an
// entry; they are reported and done without the cache, and the policy
// runs.
func TestCacheDirFailsLater(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	var f harness.List[error] // what Config.CacheFault is told
	r, err := wasm.NewRuntime(ctx, wasm.Config{CacheDir: dir, CacheFault: f.Add, Deadline: generousDeadline})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	if err := loadTiny(r, 8); err != nil {
		t.Fatal(err)
	}
	breakVersionDir(t, dir)
	for _, at := range []byte{9, 10} { // the second also compiles without the cache
		if err := loadTiny(r, at); err != nil {
			t.Fatalf("module %d, after the cache broke: %v", at, err)
		}
	}
	errs := f.Take()
	if len(errs) != 2 {
		t.Fatalf("faults = %v, want one per compilation after the cache broke", errs)
	}
	for _, err := range errs {
		if !errors.Is(err, wasm.ErrCacheDir) || !errors.As(err, new(*fs.PathError)) {
			t.Errorf("fault %v, want ErrCacheDir wrapping the file error", err)
		}
	}
}

// breakVersionDir replaces the per-version subdirectory wazero made in
// dir by a link to a directory of /proc, where no one (root included)
// can create files.
func breakVersionDir(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 || !strings.HasPrefix(entries[0].Name(), "wazero-") {
		t.Fatalf("cache dir holds %v (%v), want wazero's one subdirectory", entries, err)
	}
	sub := filepath.Join(dir, entries[0].Name())
	if err := os.RemoveAll(sub); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/proc/self", sub); err != nil {
		t.Fatal(err)
	}
}

// TestCacheDirUnusable: a cache directory that cannot be created or
// written fails NewRuntime with ErrCacheDir (the daemon then runs
// without a cache), rather than failing every later compilation. Each
// case fails for root too.
func TestCacheDirUnusable(t *testing.T) {
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	linked := t.TempDir()
	r, err := wasm.NewRuntime(ctx, wasm.Config{CacheDir: linked, Deadline: generousDeadline})
	if err != nil {
		t.Fatal(err)
	}
	r.Close(ctx)
	breakVersionDir(t, linked)

	for name, dir := range map[string]string{
		"a file":                          file,
		"under a file":                    filepath.Join(file, "wasm"),
		"an unwritable version directory": linked,
	} {
		t.Run(name, func(t *testing.T) {
			r, err := wasm.NewRuntime(ctx, wasm.Config{CacheDir: dir, Deadline: generousDeadline})
			if err == nil {
				r.Close(ctx)
			}
			if !errors.Is(err, wasm.ErrCacheDir) || !strings.Contains(err.Error(), dir) {
				t.Errorf("NewRuntime = %v, want ErrCacheDir naming %s", err, dir)
			}
		})
	}
}
