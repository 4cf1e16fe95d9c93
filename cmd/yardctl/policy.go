package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/switchyard-lb/switchyard/core/config"
	"github.com/switchyard-lb/switchyard/plugins/registry"
	"github.com/switchyard-lb/switchyard/plugins/scenario"
	"github.com/switchyard-lb/switchyard/plugins/wasm"
)

// DefaultGzipOver is the module size above which pack compresses: a
// ConfigMap holds about 1 MiB.
const DefaultGzipOver = 512 << 10

// maxConfigMapData is what pack refuses to emit: the API server's object
// limit, less room for metadata.
const maxConfigMapData = 1<<20 - 16<<10

// policySubcommands are the subcommands of `yardctl policy`.
var policySubcommands = []*command{policyValidate, policyTest, policyBench, policyPack, policyApply, policyBuild}

var policyCommand = &command{
	name:  "policy",
	short: "build, validate, test, bench, pack and apply WebAssembly balancing policies",
	usage: " <build|validate|test|bench|pack|apply> [flags] ...",
	long:  policyLong(),
	setup: func(fs *flag.FlagSet) func(context.Context, ioStreams, []string) error {
		return func(ctx context.Context, s ioStreams, args []string) error {
			if len(args) == 0 {
				return usageError{"policy: no subcommand given (want build, validate, test, bench, pack or apply)"}
			}
			var c *command
			for _, sc := range policySubcommands {
				if "policy "+args[0] == sc.name {
					c = sc
				}
			}
			if c == nil {
				return usageError{fmt.Sprintf("policy: unknown subcommand %q", args[0])}
			}
			sfs, runFn := c.flagSet(s.err)
			rest, err := parseInterspersed(sfs, args[1:])
			if err != nil {
				if errors.Is(err, flag.ErrHelp) {
					sfs.SetOutput(s.out)
					return err
				}
				return withOutput(sfs, usageError{err.Error()})
			}
			return withOutput(sfs, runFn(ctx, s, rest))
		}
	},
}

func policyLong() string {
	var b strings.Builder
	b.WriteString("Tools for policy authors (see wasm-sdk/README.md). Subcommands:\n")
	for _, c := range []struct{ name, short string }{
		{"build DIR|FILE", "build a Go, Rust or AssemblyScript policy, keeping function names"},
		{"validate FILE [--params P]", "load a module through the daemon's host, check ABI v1 and a sample decision"},
		{"test FILE --scenario S|DIR", "run a module against scenarios, check their expectations (--update records them)"},
		{"bench FILE", "measure evaluations (percentiles, allocations) with every guard on"},
		{"pack FILE --name N", "validate, then print the policy ConfigMap, compressed when large, with its sha256 pin"},
		{"apply FILE|SOURCE --name N", "(build a source,) check as pack does, then create or update the ConfigMap (--watch: on every edit)"},
	} {
		fmt.Fprintf(&b, "  %-28s %s\n", c.name, c.short)
	}
	fmt.Fprintf(&b, "Every evaluation runs under the daemon's deadline (policies.evaluationDeadline, %v by\n"+
		"default; --deadline changes it). -o json prints results, and errors, as JSON on stdout.\n", config.DefaultEvaluationDeadline)
	b.WriteString("Run 'yardctl policy <subcommand> --help' for its flags.")
	return b.String()
}

// parseInterspersed parses flags that may follow positional arguments.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// compileCacheDir is where compiled modules are kept between runs: the
// user cache directory's switchyard/wazero, "" (no cache) when there is
// none.
func compileCacheDir() string {
	d, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(d, "switchyard", "wazero")
}

func oneArg(args []string, what string) (string, error) {
	switch len(args) {
	case 0:
		return "", usageError{"missing " + what}
	case 1:
		return args[0], nil
	}
	return "", usageError{fmt.Sprintf("unexpected argument %q", args[1])}
}

// fileArg checks the output format and returns the one FILE argument of
// the policy commands.
func fileArg(output string, args []string) (string, error) {
	if err := checkOutput(output); err != nil {
		return "", err
	}
	return oneArg(args, "FILE")
}

// readModule reads a module file, gunzipping it when it is gzip.
func readModule(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read module: %w", err)
	}
	if bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		b, err = registry.Gunzip(b, registry.DefaultMaxModuleSize)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	return b, nil
}

// instantiateDeadline bounds creating an instance of the policy, its
// start function included: the daemon's bound (wasm.Config's default).
// The tests raise it, so that a loaded machine does not fail them on a
// Go guest's runtime start.
var instantiateDeadline = time.Second

// loadModule loads a module through the daemon's host with the
// daemon's default limits.
func loadModule(ctx context.Context, path string, deadline time.Duration) (*wasm.Policy, func(), error) {
	mod, err := readModule(path)
	if err != nil {
		return nil, nil, err
	}
	cfg := wasm.Config{MemoryLimitPages: 512, Deadline: deadline, InstantiateDeadline: instantiateDeadline, CacheDir: compileCacheDir()}
	rt, err := wasm.NewRuntime(ctx, cfg)
	if err != nil && cfg.CacheDir != "" { // an unwritable cache: run without
		cfg.CacheDir = ""
		rt, err = wasm.NewRuntime(ctx, cfg)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("start the WebAssembly runtime: %w", err)
	}
	p, err := rt.Load(ctx, filepath.Base(path), mod)
	if err != nil {
		_ = rt.Close(ctx)
		return nil, nil, err
	}
	return p, func() { _ = p.Close(ctx); _ = rt.Close(ctx) }, nil
}

var policyValidate = &command{
	name:  "policy validate",
	usage: " FILE [--params P.json] [--scenario S.yaml|DIR]",
	long: "Loads FILE (a .wasm module, gzip allowed) through the daemon's WebAssembly host: it must\n" +
		"follow ABI v1 (wasm-sdk/ABI.md), import nothing else, and answer a scenario within the\n" +
		"daemon's deadline: by default a small built-in one (two endpoints, no parameters);\n" +
		"--params gives the parameters (a JSON file, or inline JSON), --scenario your own\n" +
		"scenarios, whose expectations must hold. A scenario that gives its own parameters keeps\n" +
		"them; --params goes to those that give none (or, when all do, to the built-in scenario,\n" +
		"checked too). Prints the module's sha256 (the ConfigMap pin).",
	setup: func(fs *flag.FlagSet) func(context.Context, ioStreams, []string) error {
		output := outputFlag(fs)
		deadline := deadlineFlag(fs)
		paramsArg := fs.String("params", "", "the policy's parameters: a JSON file, or inline JSON such as '{\"percent\": 5}'")
		scenarioPath := fs.String("scenario", "", "scenario YAML file or directory to evaluate instead of the built-in one")
		return func(ctx context.Context, s ioStreams, args []string) error {
			path, err := fileArg(*output, args)
			if err != nil {
				return err
			}
			mod, err := readModule(path)
			if err != nil {
				return err
			}
			if _, err := validateModule(ctx, path, *paramsArg, *scenarioPath, *deadline); err != nil {
				return err
			}
			res := struct {
				File   string `json:"file"`
				Valid  bool   `json:"valid"`
				Size   int    `json:"size"`
				SHA256 string `json:"sha256"`
			}{path, true, len(mod), registry.Digest(mod)}
			if *output == "json" {
				return writeJSON(s.out, res)
			}
			_, err = fmt.Fprintf(s.out, "%s: valid ABI v1 policy, %d bytes, sha256 %s\n", path, res.Size, res.SHA256)
			return err
		}
	},
}

// validateModule loads the module at path through the daemon's host and
// checks it on the scenarios at scenarioPath (the built-in one when
// empty), with the parameters paramsArg names (a JSON file or inline
// JSON), which it returns: what validate does, and pack before packing.
func validateModule(ctx context.Context, path, paramsArg, scenarioPath string, deadline time.Duration) ([]byte, error) {
	params, err := readParams(paramsArg)
	if err != nil {
		return nil, err
	}
	scs := []*scenario.Scenario{scenario.Default()}
	if scenarioPath != "" {
		if scs, err = loadScenarios(scenarioPath); err != nil {
			return nil, err
		}
		// A scenario's own parameters are part of it (the decline it
		// expects may be about them): params fill in those of the
		// scenarios without; when every scenario has its own, the
		// built-in sample scenario checks params.
		if params != nil && !slices.ContainsFunc(scs, func(sc *scenario.Scenario) bool { return len(sc.Service.Params) == 0 }) {
			scs = append(scs, scenario.Default())
		}
	}
	p, done, err := loadModule(ctx, path, deadline)
	if err != nil {
		return nil, fmt.Errorf("%s is not a valid policy: %w", path, err)
	}
	defer done()
	if err := checkScenarios(ctx, p, path, scs, params); err != nil {
		return nil, err
	}
	return params, nil
}

// checkScenarios evaluates p on each scenario, with params (when given)
// for the scenarios that have none of their own, and fails on the first
// that fails or misses its expectations.
func checkScenarios(ctx context.Context, p *wasm.Policy, path string, scs []*scenario.Scenario, params []byte) error {
	for _, sc := range scs {
		if params != nil && len(sc.Service.Params) == 0 {
			sc.Service.Params = params
		}
		o := evaluate(ctx, p, sc)
		if o.err != nil && sc.Expect == nil {
			how := "on the built-in sample scenario (two endpoints"
			if sc.Name != scenario.Default().Name {
				how = "on scenario " + sc.Name + " ("
			} else {
				how += ", "
			}
			if len(sc.Service.Params) == 0 {
				how += "no parameters"
				if errors.Is(o.err, wasm.ErrDeclined) {
					how += ": give them with --params"
				}
			} else {
				how += "parameters " + string(sc.Service.Params)
			}
			return fmt.Errorf("%s loads but fails %s): %w", path, how, o.err)
		}
		if o.failed() {
			return linesError{fmt.Errorf("%s loads but misses the expectations of %s:\n  %s", path, sc.Name, strings.Join(o.diffs, "\n  "))}
		}
	}
	return nil
}

var policyPack = &command{
	name:  "policy pack",
	usage: " FILE --name N [--params P.json] [--scenario S.yaml|DIR]",
	long: "Prints the policy ConfigMap for FILE: namespace switchyard-system, label\n" +
		"switchyard.dev/policy=true, binaryData policy.wasm (policy.wasm.gz when the module is\n" +
		"over --gzip-over bytes), data sha256 (the pin: sha256 of the uncompressed module) and\n" +
		"params.json from --params. Apply it with kubectl apply --server-side -f - (a client-side\n" +
		"apply copies it into an annotation limited to 256 KiB, which a Go module exceeds). It first checks what\n" +
		"validate checks, with the parameters it packs: FILE must be a WebAssembly module that\n" +
		"loads and decides the built-in sample scenario (or --scenario) within the deadline\n" +
		"without trapping or declining; and --name must be a valid ConfigMap name (lowercase\n" +
		"letters, digits, '-' and '.'). Put the module under binaryData as pack does: kubectl\n" +
		"create configmap --from-file may put it under data, which the daemon refuses.",
	setup: func(fs *flag.FlagSet) func(context.Context, ioStreams, []string) error {
		output := outputFlag(fs)
		opts := packFlags(fs)
		return func(ctx context.Context, s ioStreams, args []string) error {
			path, err := fileArg(*output, args)
			if err != nil {
				return err
			}
			if err := opts.check(); err != nil {
				return err
			}
			cm, err := packFile(ctx, path, opts)
			if err != nil {
				return fmt.Errorf("not packed: %w", err)
			}
			var out []byte
			if *output == "json" {
				out, err = json.MarshalIndent(cm, "", "  ")
				out = append(out, '\n')
			} else {
				out, err = sigsyaml.Marshal(cm)
			}
			if err != nil {
				return fmt.Errorf("encode ConfigMap: %w", err)
			}
			_, err = s.out.Write(out)
			return err
		}
	},
}

// packOptions are what pack and apply check a module with and pack it
// into.
type packOptions struct {
	name, namespace, params, scenario string
	gzipOver                          int
	deadline                          time.Duration
}

// packFlags declares the flags of pack, which apply shares.
func packFlags(fs *flag.FlagSet) *packOptions {
	o := &packOptions{}
	fs.StringVar(&o.name, "name", "", "policy name: the ConfigMap's name, which Services put in switchyard.dev/policy (required)")
	fs.StringVar(&o.params, "params", "", "the policy's default parameters: a JSON file, or inline JSON")
	fs.IntVar(&o.gzipOver, "gzip-over", DefaultGzipOver, "compress modules larger than this many bytes")
	fs.StringVar(&o.namespace, "namespace", registry.DefaultNamespace, "namespace the daemons watch")
	fs.StringVar(&o.scenario, "scenario", "", "scenario YAML file or directory to check the module with instead of the built-in one")
	fs.DurationVar(&o.deadline, "deadline", config.DefaultEvaluationDeadline, deadlineUsage)
	return o
}

// check checks the command line's part of o: the name.
func (o *packOptions) check() error {
	switch {
	case o.name == "":
		return usageError{"--name is required"}
	case strings.HasPrefix(o.name, registry.BuiltinPrefix):
		return usageError{fmt.Sprintf("--name %q: the builtin: prefix is reserved", o.name)}
	}
	if errs := validation.IsDNS1123Subdomain(o.name); len(errs) > 0 {
		return usageError{fmt.Sprintf("--name %q is not a valid ConfigMap name: %s (for example %q)",
			o.name, strings.Join(errs, "; "), suggestName(o.name))}
	}
	return nil
}

// packFile checks the module at path as validate does, with the
// parameters it packs, and returns its policy ConfigMap: what pack
// prints and apply applies. o must have passed check. Its error is
// why the module was refused.
func packFile(ctx context.Context, path string, o *packOptions) (*corev1.ConfigMap, error) {
	mod, err := readModule(path)
	if err != nil {
		return nil, err
	}
	if !bytes.HasPrefix(mod, []byte("\x00asm")) {
		head := mod[:min(len(mod), 16)]
		return nil, fmt.Errorf("%s is not a WebAssembly module (it starts with %q, a module with \"\\x00asm\"): "+
			"pack the .wasm file that yardctl policy build writes, not its source", path, head)
	}
	params, err := validateModule(ctx, path, o.params, o.scenario, o.deadline)
	if err != nil {
		return nil, err
	}
	return packPolicy(mod, o.name, o.namespace, params, o.gzipOver)
}

// suggestName is name made into a valid ConfigMap name.
func suggestName(name string) string {
	b := []byte(strings.ToLower(name))
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '.' && c != '-' {
			b[i] = '-'
		}
	}
	return strings.Trim(string(b), "-.")
}

func packPolicy(mod []byte, name, namespace string, params []byte, gzipOver int) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{registry.Label: "true"}},
		Data:       map[string]string{registry.KeyPin: registry.Digest(mod)},
		BinaryData: map[string][]byte{},
	}
	if params != nil {
		cm.Data[registry.KeyParams] = string(bytes.TrimSpace(params))
	}
	if len(mod) > gzipOver {
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.DefaultCompression)
		if _, err := zw.Write(mod); err != nil {
			return nil, fmt.Errorf("compress module: %w", err)
		}
		if err := zw.Close(); err != nil {
			return nil, fmt.Errorf("compress module: %w", err)
		}
		cm.BinaryData[registry.KeyModuleGzip] = buf.Bytes()
	} else {
		cm.BinaryData[registry.KeyModule] = mod
	}
	size := 0
	for _, b := range cm.BinaryData {
		size += (len(b) + 2) / 3 * 4 // base64 in the stored object
	}
	if size > maxConfigMapData {
		return nil, fmt.Errorf("module too large for a ConfigMap: %d bytes encoded, limit about %d", size, maxConfigMapData)
	}
	if _, _, err := registry.Decode(cm, registry.DefaultMaxModuleSize); err != nil {
		return nil, fmt.Errorf("packed ConfigMap does not decode: %w", err)
	}
	return cm, nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
