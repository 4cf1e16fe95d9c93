package wasmtest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// GoTool returns the go command to build with: $GO, else "go" from PATH
// (go test puts its own toolchain first in PATH).
func GoTool() string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	return "go"
}

// CacheDir is where built modules are kept: $SWITCHYARD_CACHE/wasm-test,
// else the user cache directory's switchyard/wasm-test.
func CacheDir() (string, error) {
	if d := os.Getenv("SWITCHYARD_CACHE"); d != "" {
		return filepath.Join(d, "wasm-test"), nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("find a cache directory: %w", err)
	}
	return filepath.Join(d, "switchyard", "wasm-test"), nil
}

// BuildGo builds the Go main package in pkgDir (a directory under
// moduleDir, in the module rooted there or in one nested in it, as the
// SDK's wasm-sdk/go is) for wasip1 as a reactor, and returns the module
// bytes. The build runs in the module that holds pkgDir. hashDirs are
// further source directories the build depends on (for example an SDK);
// a change in any of them, or in pkgDir, rebuilds.
func BuildGo(moduleDir, pkgDir string, hashDirs ...string) ([]byte, error) {
	goTool := GoTool()
	ver, err := exec.Command(goTool, "env", "GOVERSION").Output()
	if err != nil {
		return nil, fmt.Errorf("run %s env GOVERSION: %w", goTool, err)
	}
	// The nearest go.mod at or above pkgDir, up to moduleDir.
	modDir, top := filepath.Clean(pkgDir), filepath.Clean(moduleDir)
	for {
		if _, err := os.Stat(filepath.Join(modDir, "go.mod")); err == nil {
			break
		}
		if modDir == top || modDir == filepath.Dir(modDir) {
			return nil, fmt.Errorf("no go.mod at or above %s inside %s", pkgDir, moduleDir)
		}
		modDir = filepath.Dir(modDir)
	}
	rel, err := filepath.Rel(modDir, pkgDir)
	if err != nil {
		return nil, fmt.Errorf("locate %s in %s: %w", pkgDir, modDir, err)
	}
	sources := append([]string{pkgDir, filepath.Join(modDir, "go.mod")}, hashDirs...)
	return Cached(filepath.Base(pkgDir), string(ver), sources, func(out string) error {
		cmd := exec.Command(goTool, "build", "-buildmode=c-shared", "-trimpath", "-ldflags=-s -w", "-o", out, "./"+filepath.ToSlash(rel))
		cmd.Dir = modDir
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build %s for wasip1: %w\n%s", rel, err, b)
		}
		return nil
	})
}

// Cached returns the module build writes to the file it is given, kept
// in CacheDir under name and a key over salt (a toolchain's version, say)
// and the contents of sources (files or directories, _test.go files
// skipped): while none of them changes, later calls, in this run or a
// later one, return the stored module without building.
func Cached(name, salt string, sources []string, build func(out string) error) ([]byte, error) {
	h := sha256.New()
	h.Write([]byte(salt))
	for _, d := range sources {
		if err := hashTree(h, d); err != nil {
			return nil, err
		}
	}
	key := hex.EncodeToString(h.Sum(nil))[:24]
	cache, err := CacheDir()
	if err != nil {
		return nil, err
	}
	out := filepath.Join(cache, name+"-"+key+".wasm")
	if b, err := os.ReadFile(out); err == nil {
		return b, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", cache, err)
	}
	tmp, err := os.CreateTemp(cache, ".build-*.wasm")
	if err != nil {
		return nil, fmt.Errorf("create a temporary module file: %w", err)
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	if err := build(tmp.Name()); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return nil, fmt.Errorf("store built module: %w", err)
	}
	return os.ReadFile(out)
}

// hashTree hashes the names and contents of the files under root (or
// root itself when it is a file), skipping _test.go files.
func hashTree(h interface{ Write([]byte) (int, error) }, root string) error {
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && !strings.HasSuffix(p, "_test.go") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("hash sources under %s: %w", root, err)
	}
	slices.Sort(files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("hash sources: %w", err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", filepath.ToSlash(strings.TrimPrefix(f, root)), len(b))
		h.Write(b)
	}
	return nil
}
