package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

var policyBuild = &command{
	name:  "policy build",
	usage: " DIR|FILE [--lang go|rust|assemblyscript] [--out F]",
	long: "Builds a policy for WebAssembly, detecting the language from DIR or FILE:\n" +
		"  Go             a main package (DIR with .go files) that calls policy.Register:\n" +
		"                 GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared, from DIR, so its go.mod\n" +
		"                 applies; the go tool from $GO or PATH\n" +
		"  Rust           one .rs file (or a DIR with exactly one) using the switchyard_policy crate:\n" +
		"                 rustc --target wasm32-unknown-unknown (Debian's rustc, $RUSTC to choose, with\n" +
		"                 libstd-rust-dev-wasm32), the SDK crate from --sdk or wasm-sdk/rust/policy\n" +
		"                 found above the source\n" +
		"  AssemblyScript one .ts file (or a DIR with exactly one): asc -O3 --use abort=, asc from $ASC,\n" +
		"                 node_modules/.bin above the source, or PATH\n" +
		"Function names are kept (a trap's wasm stack trace names the functions); --strip drops them\n" +
		"for a smaller module. Prints the module's path and size; validate it next.",
	setup: func(fs *flag.FlagSet) func(context.Context, ioStreams, []string) error {
		opts := buildFlags(fs)
		return func(ctx context.Context, s ioStreams, args []string) error {
			src, err := oneArg(args, "DIR or FILE")
			if err != nil {
				return err
			}
			b, err := newBuilder(src, opts, s.err)
			if err != nil {
				return err
			}
			size, err := b.build(ctx)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(s.out, "%s: %d bytes (%s)\n", b.outName, size, b.lang)
			return err
		}
	},
}

// buildOptions are the flags of build, which apply shares to build a
// source it is given.
type buildOptions struct {
	out, lang, sdk string
	strip          bool
}

func buildFlags(fs *flag.FlagSet) *buildOptions {
	o := &buildOptions{}
	fs.StringVar(&o.out, "out", "", "output file; default policy.wasm next to the source")
	fs.StringVar(&o.lang, "lang", "", "go, rust or assemblyscript; default: detected from the source")
	fs.BoolVar(&o.strip, "strip", false, "drop function names and debug information (smaller, unreadable stack traces)")
	fs.StringVar(&o.sdk, "sdk", "", "Rust only: the SDK crate's directory (wasm-sdk/rust/policy); default: found above the source")
	return o
}

// isSource reports whether path names a policy's source rather than a
// module: a directory, or a .go, .rs or .ts file.
func isSource(path string) bool {
	if info, err := os.Stat(path); err == nil && info.IsDir() {
		return true
	}
	switch filepath.Ext(path) {
	case ".go", ".rs", ".ts":
		return true
	}
	return false
}

// newBuilder returns the builder of the policy source src (a directory
// or a file): its language detected unless o names it, its output o.out
// or policy.wasm next to the source, whose directory it creates.
func newBuilder(src string, o *buildOptions, log io.Writer) (*builder, error) {
	b := &builder{src: src, strip: o.strip, sdk: o.sdk, log: log, outName: o.out}
	var err error
	if b.lang, b.file, err = detectLanguage(src, o.lang); err != nil {
		return nil, err
	}
	if b.outName == "" {
		b.outName = filepath.Join(b.dir(), "policy.wasm")
	}
	if b.out, err = filepath.Abs(b.outName); err != nil {
		return nil, fmt.Errorf("output path: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(b.out), 0o755); err != nil {
		return nil, fmt.Errorf("output directory: %w", err)
	}
	return b, nil
}

// Languages policy build knows.
const (
	langGo   = "go"
	langRust = "rust"
	langAS   = "assemblyscript"
)

// detectLanguage returns the language of src (a directory or a file) and,
// for Rust and AssemblyScript, the one source file to compile.
func detectLanguage(src, lang string) (string, string, error) {
	switch lang {
	case "", langGo, langRust, langAS:
	default:
		return "", "", usageError{fmt.Sprintf("--lang %q: want go, rust or assemblyscript", lang)}
	}
	info, err := os.Stat(src)
	if err != nil {
		return "", "", fmt.Errorf("policy source: %w", err)
	}
	byExt := map[string]string{".go": langGo, ".rs": langRust, ".ts": langAS}
	if !info.IsDir() {
		l := byExt[filepath.Ext(src)]
		if lang != "" {
			l = lang
		}
		switch l {
		case "":
			return "", "", fmt.Errorf("%s: cannot tell the language from the file name (want .go, .rs or .ts, or --lang)", src)
		case langGo:
			return langGo, "", fmt.Errorf("%s: build a Go policy by its package directory, not a file", src)
		}
		return l, src, nil
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return "", "", fmt.Errorf("policy source: %w", err)
	}
	files := map[string][]string{}
	for _, e := range entries {
		n := e.Name()
		if l, ok := byExt[filepath.Ext(n)]; ok && !e.IsDir() && !strings.HasSuffix(n, "_test.go") && !strings.HasSuffix(n, ".d.ts") {
			files[l] = append(files[l], filepath.Join(src, n))
		}
	}
	if lang == "" {
		var found []string
		for _, l := range []string{langGo, langRust, langAS} {
			if len(files[l]) > 0 {
				found = append(found, l)
			}
		}
		switch len(found) {
		case 0:
			return "", "", fmt.Errorf("%s holds no policy source (.go, .rs or .ts files)", src)
		case 1:
			lang = found[0]
		default:
			return "", "", usageError{fmt.Sprintf("%s holds %s sources: choose one with --lang", src, strings.Join(found, " and "))}
		}
	}
	if lang == langGo {
		return langGo, "", nil
	}
	switch len(files[lang]) {
	case 0:
		return "", "", fmt.Errorf("%s holds no %s source", src, lang)
	case 1:
		return lang, files[lang][0], nil
	}
	return "", "", usageError{fmt.Sprintf("%s holds several %s files (%s): name the policy's file", src, lang, strings.Join(files[lang], ", "))}
}

// builder runs one language's compiler.
type builder struct {
	// src is the source as given, file the one file to compile (Rust,
	// AssemblyScript), lang its language.
	src, file, lang string
	// out is the module's absolute path, outName as the user gave it (or
	// its default).
	out, outName string
	sdk          string
	strip        bool
	log          io.Writer // the compiler's output
}

// dir is the source's directory.
func (b *builder) dir() string {
	if b.file != "" {
		return filepath.Dir(b.file)
	}
	return b.src
}

// build compiles the source and returns the size of the module written.
func (b *builder) build(ctx context.Context) (int64, error) {
	var err error
	switch b.lang {
	case langGo:
		err = b.goBuild(ctx)
	case langRust:
		err = b.rustBuild(ctx)
	default:
		err = b.asBuild(ctx)
	}
	if err != nil {
		return 0, err
	}
	info, err := os.Stat(b.out)
	if err != nil {
		return 0, fmt.Errorf("built module: %w", err)
	}
	return info.Size(), nil
}

func (b *builder) run(ctx context.Context, dir string, env []string, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = b.log, b.log
	if err := cmd.Run(); err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return fmt.Errorf("%s build: %w (see the toolchain section of wasm-sdk/README.md)", b.lang, err)
		}
		return fmt.Errorf("%s build of %s: %s %s: %w", b.lang, b.src, name, strings.Join(args, " "), err)
	}
	return nil
}

func (b *builder) goBuild(ctx context.Context) error {
	goTool := os.Getenv("GO")
	if goTool == "" {
		goTool = "go"
	}
	args := []string{"build", "-buildmode=c-shared", "-trimpath"}
	if b.strip {
		args = append(args, "-ldflags=-s -w")
	}
	args = append(args, "-o", b.out, ".")
	if err := b.run(ctx, b.src, []string{"GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0"}, goTool, args...); err != nil {
		return fmt.Errorf("go build for wasip1 in %s: %w", b.src, err)
	}
	return nil
}

// rustFlags are the flags of every rustc call, as wasm-sdk/wasm.mk builds
// the examples.
var rustFlags = []string{"--edition", "2021", "--target", "wasm32-unknown-unknown", "-O", "-C", "panic=abort", "-C", "codegen-units=1"}

func (b *builder) rustBuild(ctx context.Context) error {
	rustc := os.Getenv("RUSTC")
	if rustc == "" {
		rustc = "rustc"
		if _, err := os.Stat("/usr/bin/rustc"); err == nil {
			rustc = "/usr/bin/rustc" // Debian's, with the wasm32 std; rustup's may come first in PATH
		}
	}
	if err := checkRustTarget(ctx, rustc); err != nil {
		return err
	}
	sdk := b.sdk
	if sdk == "" {
		sdk = findAbove(filepath.Dir(b.file), filepath.Join("wasm-sdk", "rust", "policy", "lib.rs"))
		if sdk == "" {
			return fmt.Errorf("rust build: the SDK crate (wasm-sdk/rust/policy) is not above %s: give --sdk DIR", b.file)
		}
		sdk = filepath.Dir(sdk)
	}
	tmp, err := os.MkdirTemp("", "yardctl-rust-")
	if err != nil {
		return fmt.Errorf("rust build: %w", err)
	}
	defer os.RemoveAll(tmp)
	rlib := filepath.Join(tmp, "libswitchyard_policy.rlib")
	args := append(append([]string{}, rustFlags...), "--crate-type", "rlib", "--crate-name", "switchyard_policy", "-o", rlib, filepath.Join(sdk, "lib.rs"))
	if err := b.run(ctx, "", nil, rustc, args...); err != nil {
		return err
	}
	args = append(append([]string{}, rustFlags...), "-C", "lto", "--crate-type", "cdylib", "--extern", "switchyard_policy="+rlib, "-o", b.out, b.file)
	if b.strip {
		args = append(args, "-C", "strip=symbols")
	} else {
		args = append(args, "-C", "strip=debuginfo") // keeps the name section
	}
	return b.run(ctx, "", nil, rustc, args...)
}

// checkRustTarget fails, saying what to install, when rustc has no wasm32
// standard library, which rustc would report as a missing crate core.
func checkRustTarget(ctx context.Context, rustc string) error {
	out, err := exec.CommandContext(ctx, rustc, "--print", "sysroot").Output()
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return fmt.Errorf("rust build: %w (see the toolchain section of wasm-sdk/README.md)", err)
		}
		return fmt.Errorf("rust build: %s --print sysroot: %w", rustc, err)
	}
	sysroot := strings.TrimSpace(string(out))
	if !fileExists(filepath.Join(sysroot, "lib", "rustlib", "wasm32-unknown-unknown")) {
		return fmt.Errorf("rust build: %s has no wasm32-unknown-unknown standard library (none in %s): "+
			"on Debian or Ubuntu apt-get install rustc libstd-rust-dev-wasm32 and use /usr/bin/rustc "+
			"(with rustup: rustup target add wasm32-unknown-unknown); see the toolchain section of wasm-sdk/README.md",
			rustc, filepath.Join(sysroot, "lib", "rustlib"))
	}
	return nil
}

func (b *builder) asBuild(ctx context.Context) error {
	asc := os.Getenv("ASC")
	if asc == "" {
		if asc = findAbove(filepath.Dir(b.file), filepath.Join("node_modules", ".bin", "asc")); asc == "" {
			asc = "asc"
		}
	}
	args := []string{b.file, "-O3", "--use", "abort=", "-o", b.out}
	if !b.strip {
		args = append(args, "--debug") // keeps the name section
	}
	return b.run(ctx, "", nil, asc, args...)
}

// findAbove returns dir/rel or the same in the closest parent of dir
// that has it, "" when none does.
func findAbove(dir, rel string) string {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return ""
	}
	for {
		if p := filepath.Join(dir, rel); fileExists(p) {
			return p
		}
		// The AssemblyScript SDK keeps its node_modules in
		// wasm-sdk/assemblyscript; look there too from the repository.
		if p := filepath.Join(dir, "wasm-sdk", "assemblyscript", rel); strings.HasPrefix(rel, "node_modules") && fileExists(p) {
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
