package walkthrough

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/switchyard-lb/switchyard/plugins/wasm/wasmtest"
)

// The languages of the walkthrough, as `yardctl policy build --lang`
// names them.
const (
	Go             = "go"
	Rust           = "rust"
	AssemblyScript = "assemblyscript"
)

// Languages are the walkthrough's languages, in the page's order.
var Languages = []string{Go, Rust, AssemblyScript}

// README is the page, relative to the repository's root.
const README = "wasm-sdk/README.md"

// File is one file of the walkthrough: its path relative to the policy's
// directory and its content.
type File struct {
	Path, Content string
}

// marker is the HTML comment before a file's fenced block.
var marker = regexp.MustCompile(`^<!-- walkthrough(?: ([a-z]+))?: (\S+) -->$`)

// Parse returns the files of the walkthrough in page for lang: the blocks
// marked for lang and those marked for every language, in the page's
// order. A marker must be followed by a fenced block on its next line; a
// marker naming an unknown language, a path outside the policy's
// directory, a path given twice for lang, an unterminated block or no
// block for lang is an error naming the line.
func Parse(page []byte, lang string) ([]File, error) {
	if !slices.Contains(Languages, lang) {
		return nil, fmt.Errorf("walkthrough: language %q: want one of %s", lang, strings.Join(Languages, ", "))
	}
	var files []File
	lines := strings.Split(string(page), "\n")
	for i := 0; i < len(lines); i++ {
		if strings.HasPrefix(lines[i], "```") { // an unmarked block: skip it
			for i++; i < len(lines) && lines[i] != "```"; i++ {
			}
			continue
		}
		m := marker.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		at := i + 1
		only, path := m[1], m[2]
		if only != "" && !slices.Contains(Languages, only) {
			return nil, fmt.Errorf("walkthrough: line %d: unknown language %q", at, only)
		}
		if !filepath.IsLocal(path) {
			return nil, fmt.Errorf("walkthrough: line %d: %s is not a path inside the policy's directory", at, path)
		}
		if i++; i >= len(lines) || !strings.HasPrefix(lines[i], "```") {
			return nil, fmt.Errorf("walkthrough: line %d: the marker of %s is not followed by a fenced block", at, path)
		}
		var body strings.Builder
		for i++; i < len(lines) && lines[i] != "```"; i++ {
			body.WriteString(lines[i])
			body.WriteByte('\n')
		}
		if i >= len(lines) {
			return nil, fmt.Errorf("walkthrough: line %d: the block of %s is not closed", at, path)
		}
		if only != "" && only != lang {
			continue
		}
		if slices.ContainsFunc(files, func(f File) bool { return f.Path == path }) {
			return nil, fmt.Errorf("walkthrough: line %d: %s is given twice for %s", at, path, lang)
		}
		files = append(files, File{Path: path, Content: body.String()})
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("walkthrough: no file for %s", lang)
	}
	return files, nil
}

// Load returns Parse of the README in the checkout at root.
func Load(root, lang string) ([]File, error) {
	page, err := os.ReadFile(filepath.Join(root, README))
	if err != nil {
		return nil, fmt.Errorf("walkthrough: %w", err)
	}
	return Parse(page, lang)
}

// Source returns the one policy source among files (a .go, .rs or .ts
// file).
func Source(files []File) (File, error) {
	var found []File
	for _, f := range files {
		switch filepath.Ext(f.Path) {
		case ".go", ".rs", ".ts":
			found = append(found, f)
		}
	}
	if len(found) != 1 {
		return File{}, fmt.Errorf("walkthrough: %d policy sources, want 1", len(found))
	}
	return found[0], nil
}

// Write writes files into dir, creating their directories.
func Write(dir string, files []File) error {
	for _, f := range files {
		p := filepath.Join(dir, f.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("walkthrough: %w", err)
		}
		if err := os.WriteFile(p, []byte(f.Content), 0o644); err != nil {
			return fmt.Errorf("walkthrough: %w", err)
		}
	}
	return nil
}

// Layout is a policy's directory as Setup leaves it.
type Layout struct {
	// Build are the arguments of `yardctl policy build` there: the
	// source and flags, paths absolute.
	Build []string
	// Source is the policy's source file, as the page has it.
	Source File
}

// Setup lays the empty directory dir out as the walkthrough in lang
// leaves it right before `yardctl policy build`, with the SDKs of the
// checkout at root. Besides the page's files:
//   - Go: go mod init and go get the SDK's module @latest, as the page
//     runs them, from GoProxy's proxy of the checkout (the SDK is not
//     fetched from the network, and the daemon's module is out of reach);
//   - Rust: nothing; the build gets --sdk root/wasm-sdk/rust/policy;
//   - AssemblyScript: the SDK copied into sdk/ and, instead of a
//     download, node_modules a link to root's
//     wasm-sdk/assemblyscript/node_modules when npm ci has installed it
//     there: the version the SDK's lock file pins and the page's npm
//     install names (TestPinnedCompiler). Without it, the build needs
//     $ASC.
func Setup(ctx context.Context, root, dir, lang string) (*Layout, error) {
	files, err := Load(root, lang)
	if err != nil {
		return nil, err
	}
	src, err := Source(files)
	if err != nil {
		return nil, err
	}
	switch lang {
	case Go:
		proxy, err := os.MkdirTemp("", "switchyard-goproxy-")
		if err != nil {
			return nil, fmt.Errorf("walkthrough: %w", err)
		}
		defer os.RemoveAll(proxy)
		if _, err := GoProxy(root, proxy); err != nil {
			return nil, err
		}
		env := []string{"GOPROXY=file://" + filepath.ToSlash(proxy), "GONOSUMDB=" + SDKModule, "GOPRIVATE=", "GONOPROXY="}
		steps := [][]string{
			{"mod", "init", "example.com/mypolicy"},
			{"get", SDKModule + "@latest"},
		}
		if err := goRun(ctx, dir, env, steps...); err != nil {
			return nil, err
		}
		if err := Write(dir, files); err != nil {
			return nil, err
		}
		return &Layout{Build: []string{dir}, Source: src}, nil
	case Rust:
		if err := Write(dir, files); err != nil {
			return nil, err
		}
		return &Layout{Build: []string{filepath.Join(dir, src.Path), "--sdk", filepath.Join(root, "wasm-sdk", "rust", "policy")}, Source: src}, nil
	}
	as := filepath.Join(root, "wasm-sdk", "assemblyscript")
	if err := os.CopyFS(filepath.Join(dir, "sdk"), os.DirFS(filepath.Join(as, "sdk"))); err != nil {
		return nil, fmt.Errorf("walkthrough: copy the AssemblyScript SDK: %w", err)
	}
	if modules := filepath.Join(as, "node_modules"); fileExists(filepath.Join(modules, ".bin", "asc")) {
		if err := os.Symlink(modules, filepath.Join(dir, "node_modules")); err != nil {
			return nil, fmt.Errorf("walkthrough: %w", err)
		}
	}
	if err := Write(dir, files); err != nil {
		return nil, err
	}
	return &Layout{Build: []string{filepath.Join(dir, src.Path)}, Source: src}, nil
}

// goRun runs each step as a go command in dir, with env added to the
// environment.
func goRun(ctx context.Context, dir string, env []string, steps ...[]string) error {
	for _, args := range steps {
		cmd := exec.CommandContext(ctx, wasmtest.GoTool(), args...)
		cmd.Dir = dir
		cmd.Env = append(append(os.Environ(), "GOFLAGS=-mod=mod"), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("walkthrough: go %s: %w\n%s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
