package walkthrough

import (
	"archive/zip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// SDKModule is the Go SDK's module path: its own module, wasm-sdk/go in
// the checkout, depending on nothing.
const SDKModule = "github.com/switchyard-lb/switchyard/wasm-sdk/go"

// GoProxy writes into dir a module proxy (for GOPROXY=file://dir) that
// serves the Go SDK of the checkout at root, and nothing else, as one
// version, which it returns: v0.0.0-checkout-<digest of its files>, so
// that an edited SDK is a new version and never meets a stale copy in
// the module cache. A module resolving the SDK through it is one that
// requires the SDK as a policy author's does, from a proxy, with no
// replace line and no module of the daemon's within reach.
func GoProxy(root, dir string) (string, error) {
	src := filepath.Join(root, "wasm-sdk", "go")
	var files []string // slash paths relative to src, in walk (lexical) order
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case p != src && strings.HasPrefix(d.Name(), "."): // no hidden files in a module
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		case !d.Type().IsRegular():
			return nil
		}
		rel, err := filepath.Rel(src, p)
		files = append(files, filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		return "", fmt.Errorf("walkthrough: the Go SDK: %w", err)
	}
	h := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(src, filepath.FromSlash(f)))
		if err != nil {
			return "", fmt.Errorf("walkthrough: the Go SDK: %w", err)
		}
		fmt.Fprintf(h, "%s %d\n", f, len(b))
		h.Write(b)
	}
	version := "v0.0.0-checkout-" + hex.EncodeToString(h.Sum(nil))[:16]

	at := filepath.Join(dir, filepath.FromSlash(SDKModule), "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		return "", fmt.Errorf("walkthrough: %w", err)
	}
	mod, err := os.ReadFile(filepath.Join(src, "go.mod"))
	if err != nil {
		return "", fmt.Errorf("walkthrough: the Go SDK: %w", err)
	}
	for name, content := range map[string]string{
		"list":            version + "\n",
		version + ".info": fmt.Sprintf(`{"Version":%q,"Time":"2026-01-01T00:00:00Z"}`, version),
		version + ".mod":  string(mod),
	} {
		if err := os.WriteFile(filepath.Join(at, name), []byte(content), 0o644); err != nil {
			return "", fmt.Errorf("walkthrough: %w", err)
		}
	}
	if err := writeModuleZip(filepath.Join(at, version+".zip"), src, SDKModule+"@"+version, files); err != nil {
		return "", fmt.Errorf("walkthrough: the Go SDK's module zip: %w", err)
	}
	return version, nil
}

// writeModuleZip writes files of src into a module zip at out, each under
// prefix/ as the module proxy protocol has it.
func writeModuleZip(out, src, prefix string, files []string) (err error) {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	z := zip.NewWriter(f)
	for _, name := range files {
		w, err := z.Create(path.Join(prefix, name))
		if err != nil {
			return err
		}
		b, err := os.ReadFile(filepath.Join(src, filepath.FromSlash(name)))
		if err != nil {
			return err
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return z.Close()
}
