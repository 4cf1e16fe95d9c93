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
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/goccy/go-yaml"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/plugins/registry"
	"github.com/switchyard-lb/switchyard/plugins/wasm"
)

// DefaultGzipOver is the module size above which pack compresses: a
// ConfigMap holds about 1 MiB.
const DefaultGzipOver = 512 << 10

// maxConfigMapData is what pack refuses to emit: the API server's object
// limit, less room for metadata.
const maxConfigMapData = 1<<20 - 16<<10

// policySubcommands are the subcommands of `yardctl policy`.
var policySubcommands = []*command{policyValidate, policyTest, policyBench, policyPack, policyBuild}

var policyCommand = &command{
	name:  "policy",
	short: "build, validate, test, bench and pack WebAssembly balancing policies",
	usage: " <build|validate|test|bench|pack> [flags] ...",
	long:  policyLong(),
	setup: func(fs *flag.FlagSet) func(context.Context, ioStreams, []string) error {
		return func(ctx context.Context, s ioStreams, args []string) error {
			if len(args) == 0 {
				return usageError{"policy: no subcommand given (want build, validate, test, bench or pack)"}
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
				return usageError{err.Error()}
			}
			return runFn(ctx, s, rest)
		}
	},
}

func policyLong() string {
	var b strings.Builder
	b.WriteString("Tools for policy authors (see wasm-sdk/README.md). Subcommands:\n")
	for _, c := range []struct{ name, short string }{
		{"build DIR", "build a Go SDK policy for wasip1"},
		{"validate FILE", "load a module through the daemon's host and check ABI v1"},
		{"test FILE --scenario S.yaml", "run a module against a scenario and print its decision"},
		{"bench FILE", "measure the cost of one evaluation with every guard on"},
		{"pack FILE --name N", "print the policy ConfigMap, compressed when large, with its sha256 pin"},
	} {
		fmt.Fprintf(&b, "  %-28s %s\n", c.name, c.short)
	}
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

// loadModule loads a module through the daemon's host with the
// daemon's default limits.
func loadModule(ctx context.Context, path string, deadline time.Duration) (*wasm.Policy, func(), error) {
	mod, err := readModule(path)
	if err != nil {
		return nil, nil, err
	}
	cfg := wasm.Config{MemoryLimitPages: 512, Deadline: deadline, CacheDir: compileCacheDir()}
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
	usage: " FILE",
	long: "Loads FILE (a .wasm module, gzip allowed) through the daemon's WebAssembly host: it must\n" +
		"follow ABI v1 (wasm-sdk/ABI.md), import nothing else, and answer a small built-in\n" +
		"scenario within the deadline. Prints the module's sha256 (the ConfigMap pin).",
	setup: func(fs *flag.FlagSet) func(context.Context, ioStreams, []string) error {
		output := outputFlag(fs)
		deadline := fs.Duration("deadline", 50*time.Millisecond, "evaluation deadline")
		return func(ctx context.Context, s ioStreams, args []string) error {
			path, err := fileArg(*output, args)
			if err != nil {
				return err
			}
			mod, err := readModule(path)
			if err != nil {
				return err
			}
			p, done, err := loadModule(ctx, path, *deadline)
			if err != nil {
				return fmt.Errorf("%s is not a valid policy: %w", path, err)
			}
			defer done()
			sc := defaultScenario()
			if _, err := p.Evaluate(ctx, sc.input()); err != nil {
				return fmt.Errorf("%s loads but fails on a sample scenario: %w", path, err)
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

// scenario is a test scenario file: one Service port, the node and the
// endpoints with their live statistics.
type scenario struct {
	Service struct {
		Namespace string `yaml:"namespace"`
		Name      string `yaml:"name"`
		Type      string `yaml:"type"`
		Port      struct {
			Name     string `yaml:"name"`
			Protocol string `yaml:"protocol"`
			Port     uint16 `yaml:"port"`
		} `yaml:"port"`
		Params string `yaml:"params"`
	} `yaml:"service"`
	Node struct {
		Name string `yaml:"name"`
		Zone string `yaml:"zone"`
	} `yaml:"node"`
	Now       time.Time          `yaml:"now"`
	Endpoints []scenarioEndpoint `yaml:"endpoints"`
}

type scenarioEndpoint struct {
	Address     string        `yaml:"address"`
	Port        uint16        `yaml:"port"`
	Node        string        `yaml:"node"`
	Zone        string        `yaml:"zone"`
	Ready       *bool         `yaml:"ready"` // default true
	Serving     *bool         `yaml:"serving"`
	Terminating bool          `yaml:"terminating"`
	HintZones   []string      `yaml:"hintZones"`
	Age         time.Duration `yaml:"age"`
	Stats       struct {
		ActiveConns   uint32 `yaml:"activeConns"`
		InactiveConns uint32 `yaml:"inactiveConns"`
		ConnRate      uint32 `yaml:"connRate"`
		BytesInRate   uint64 `yaml:"bytesInRate"`
		BytesOutRate  uint64 `yaml:"bytesOutRate"`
	} `yaml:"stats"`

	addr netip.Addr
}

func defaultScenario() *scenario {
	sc := &scenario{}
	sc.Service.Namespace, sc.Service.Name = "default", "sample"
	sc.Service.Port.Port = 80
	sc.Node.Name, sc.Node.Zone = "node-a", "zone-a"
	sc.Endpoints = []scenarioEndpoint{
		{Address: "10.0.0.1", Port: 8080, Node: "node-a", Zone: "zone-a"},
		{Address: "10.0.1.1", Port: 8080, Node: "node-b", Zone: "zone-b"},
	}
	_ = sc.check()
	return sc
}

func loadScenario(path string) (*scenario, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read scenario: %w", err)
	}
	var sc scenario
	if err := yaml.UnmarshalWithOptions(b, &sc, yaml.Strict()); err != nil {
		return nil, fmt.Errorf("scenario %s: %s", path, yaml.FormatError(err, false, true))
	}
	if err := sc.check(); err != nil {
		return nil, fmt.Errorf("scenario %s: %w", path, err)
	}
	return &sc, nil
}

func (sc *scenario) check() error {
	if sc.Service.Params != "" && !json.Valid([]byte(sc.Service.Params)) {
		return errors.New("service.params is not valid JSON")
	}
	if _, err := model.ParseProtocol(sc.Service.Port.Protocol); err != nil {
		return fmt.Errorf("service.port.protocol: %w", err)
	}
	for i := range sc.Endpoints {
		e := &sc.Endpoints[i]
		a, err := netip.ParseAddr(e.Address)
		if err != nil {
			return fmt.Errorf("endpoints[%d].address: %w", i, err)
		}
		e.addr = a
	}
	if sc.Now.IsZero() {
		sc.Now = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	return nil
}

func (sc *scenario) input() *plugin.PolicyInput {
	proto, _ := model.ParseProtocol(sc.Service.Port.Protocol)
	typ := model.ClusterIP
	switch sc.Service.Type {
	case "NodePort":
		typ = model.NodePort
	case "LoadBalancer":
		typ = model.LoadBalancer
	}
	port := model.ServicePort{Name: sc.Service.Port.Name, Protocol: proto, Port: sc.Service.Port.Port}
	node := &model.Node{Name: sc.Node.Name, Zone: sc.Node.Zone, Ready: true}
	in := &plugin.PolicyInput{
		Service: &model.Service{Key: model.ServiceKey{Namespace: sc.Service.Namespace, Name: sc.Service.Name}, Type: typ,
			Ports: []model.ServicePort{port}, PolicyParams: sc.Service.Params},
		Port: port, Node: node, Now: sc.Now, Params: []byte(sc.Service.Params),
	}
	for _, e := range sc.Endpoints {
		ready := e.Ready == nil || *e.Ready
		serving := ready
		if e.Serving != nil {
			serving = *e.Serving
		}
		in.Endpoints = append(in.Endpoints, plugin.PolicyEndpoint{
			Endpoint: model.Endpoint{Addr: e.addr, Port: e.Port, PortName: port.Name, Protocol: proto,
				NodeName: e.Node, Zone: e.Zone, Ready: ready, Serving: serving, Terminating: e.Terminating, HintZones: e.HintZones},
			Local:     e.Node != "" && e.Node == node.Name,
			SameZone:  e.Zone != "" && e.Zone == node.Zone,
			FirstSeen: sc.Now.Add(-e.Age),
			Stats: plugin.EndpointStats{ActiveConns: e.Stats.ActiveConns, InactiveConns: e.Stats.InactiveConns,
				ConnRate: e.Stats.ConnRate, BytesInRate: e.Stats.BytesInRate, BytesOutRate: e.Stats.BytesOutRate},
		})
	}
	return in
}

// decisionJSON is what `policy test -o json` prints.
type decisionJSON struct {
	Scheduler    string           `json:"scheduler,omitempty"`
	Flags        []string         `json:"flags,omitempty"`
	ReevaluateMs int64            `json:"reevaluateMs,omitempty"`
	Endpoints    []endpointWeight `json:"endpoints"`
}

type endpointWeight struct {
	Address netip.AddrPort `json:"address"`
	Weight  uint32         `json:"weight"`
}

var policyTest = &command{
	name:  "policy test",
	usage: " FILE --scenario S.yaml",
	long: "Runs FILE against a scenario (service, node, endpoints with their statistics; see\n" +
		"wasm-sdk/README.md) through the daemon's host and prints the decision: each endpoint's\n" +
		"weight (0 drains), the IPVS scheduler and the re-evaluation interval.",
	setup: func(fs *flag.FlagSet) func(context.Context, ioStreams, []string) error {
		output := outputFlag(fs)
		scenarioPath := fs.String("scenario", "", "scenario YAML file (required)")
		deadline := fs.Duration("deadline", 50*time.Millisecond, "evaluation deadline")
		return func(ctx context.Context, s ioStreams, args []string) error {
			path, err := fileArg(*output, args)
			if err != nil {
				return err
			}
			if *scenarioPath == "" {
				return usageError{"--scenario is required"}
			}
			sc, err := loadScenario(*scenarioPath)
			if err != nil {
				return err
			}
			p, done, err := loadModule(ctx, path, *deadline)
			if err != nil {
				return err
			}
			defer done()
			in := sc.input()
			res, err := p.Evaluate(ctx, in)
			if err != nil {
				return err
			}
			d := decisionJSON{Scheduler: res.Scheduler, Flags: res.Flags, ReevaluateMs: res.Reevaluate.Milliseconds()}
			for i, e := range in.Endpoints {
				d.Endpoints = append(d.Endpoints, endpointWeight{netip.AddrPortFrom(e.Addr, e.Port), res.Weights[i]})
			}
			if *output == "json" {
				return writeJSON(s.out, d)
			}
			tw := tabwriter.NewWriter(s.out, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "ENDPOINT\tNODE\tZONE\tWEIGHT\n")
			for i, e := range in.Endpoints {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", d.Endpoints[i].Address, e.NodeName, e.Zone, res.Weights[i])
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			sched := res.Scheduler
			if sched == "" {
				sched = "(the Service's)"
			}
			_, err = fmt.Fprintf(s.out, "scheduler: %s %s\nreevaluate: %v\n", sched, strings.Join(res.Flags, ","), res.Reevaluate)
			return err
		}
	},
}

var policyBench = &command{
	name:  "policy bench",
	usage: " FILE",
	long: "Measures one evaluation of FILE with every guard on (deadline, memory cap, output\n" +
		"checks), over a scenario or over synthetic endpoints.",
	setup: func(fs *flag.FlagSet) func(context.Context, ioStreams, []string) error {
		output := outputFlag(fs)
		scenarioPath := fs.String("scenario", "", "scenario YAML file; default: --endpoints synthetic endpoints")
		endpoints := fs.Int("endpoints", 50, "synthetic endpoints when no --scenario is given")
		duration := fs.Duration("duration", time.Second, "how long to measure")
		return func(ctx context.Context, s ioStreams, args []string) error {
			path, err := fileArg(*output, args)
			if err != nil {
				return err
			}
			var in *plugin.PolicyInput
			if *scenarioPath != "" {
				sc, err := loadScenario(*scenarioPath)
				if err != nil {
					return err
				}
				in = sc.input()
			} else {
				in = syntheticInput(*endpoints)
			}
			p, done, err := loadModule(ctx, path, time.Second)
			if err != nil {
				return err
			}
			defer done()
			if _, err := p.Evaluate(ctx, in); err != nil { // warm up
				return err
			}
			n, start := 0, time.Now()
			for time.Since(start) < *duration {
				if _, err := p.Evaluate(ctx, in); err != nil {
					return err
				}
				n++
			}
			per := time.Since(start) / time.Duration(max(n, 1))
			res := struct {
				Endpoints       int   `json:"endpoints"`
				Evaluations     int   `json:"evaluations"`
				NsPerEvaluation int64 `json:"nsPerEvaluation"`
			}{len(in.Endpoints), n, per.Nanoseconds()}
			if *output == "json" {
				return writeJSON(s.out, res)
			}
			_, err = fmt.Fprintf(s.out, "%d endpoints: %d evaluations, %v per evaluation\n", res.Endpoints, n, per)
			return err
		}
	},
}

func syntheticInput(n int) *plugin.PolicyInput {
	sc := defaultScenario()
	sc.Endpoints = nil
	for i := range n {
		zone := "zone-a"
		if i%3 != 0 {
			zone = "zone-b"
		}
		sc.Endpoints = append(sc.Endpoints, scenarioEndpoint{
			addr: netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), Port: 8080,
			Node: fmt.Sprintf("node-%d", i%20), Zone: zone, Age: time.Duration(i) * time.Second,
		})
		sc.Endpoints[i].Stats.ActiveConns = uint32(i % 100)
	}
	return sc.input()
}

var policyPack = &command{
	name:  "policy pack",
	usage: " FILE --name N [--params P.json]",
	long: "Prints the policy ConfigMap for FILE: namespace switchyard-system, label\n" +
		"switchyard.dev/policy=true, binaryData policy.wasm (policy.wasm.gz when the module is\n" +
		"over --gzip-over bytes), data sha256 (the pin: sha256 of the uncompressed module) and\n" +
		"params.json from --params. Apply it with kubectl apply -f -.",
	setup: func(fs *flag.FlagSet) func(context.Context, ioStreams, []string) error {
		output := outputFlag(fs)
		name := fs.String("name", "", "policy name: the ConfigMap's name, which Services put in switchyard.dev/policy (required)")
		params := fs.String("params", "", "JSON file with the policy's default parameters")
		gzipOver := fs.Int("gzip-over", DefaultGzipOver, "compress modules larger than this many bytes")
		namespace := fs.String("namespace", registry.DefaultNamespace, "namespace the daemons watch")
		return func(ctx context.Context, s ioStreams, args []string) error {
			path, err := fileArg(*output, args)
			if err != nil {
				return err
			}
			if *name == "" {
				return usageError{"--name is required"}
			}
			if strings.HasPrefix(*name, registry.BuiltinPrefix) {
				return usageError{fmt.Sprintf("--name %q: the builtin: prefix is reserved", *name)}
			}
			cm, err := packPolicy(path, *name, *namespace, *params, *gzipOver)
			if err != nil {
				return err
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

func packPolicy(path, name, namespace, paramsPath string, gzipOver int) (*corev1.ConfigMap, error) {
	mod, err := readModule(path)
	if err != nil {
		return nil, err
	}
	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{registry.Label: "true"}},
		Data:       map[string]string{registry.KeyPin: registry.Digest(mod)},
		BinaryData: map[string][]byte{},
	}
	if paramsPath != "" {
		p, err := os.ReadFile(paramsPath)
		if err != nil {
			return nil, fmt.Errorf("read params: %w", err)
		}
		if !json.Valid(p) {
			return nil, fmt.Errorf("params %s is not valid JSON", paramsPath)
		}
		cm.Data[registry.KeyParams] = string(bytes.TrimSpace(p))
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

var policyBuild = &command{
	name:  "policy build",
	usage: " DIR",
	long: "Builds the Go SDK policy in DIR (a main package that calls policy.Register) for\n" +
		"WebAssembly: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared. Runs the go tool\n" +
		"from $GO or PATH, from DIR, so DIR's module (and go.mod) applies.",
	setup: func(fs *flag.FlagSet) func(context.Context, ioStreams, []string) error {
		out := fs.String("out", "", "output file; default DIR/policy.wasm")
		return func(ctx context.Context, s ioStreams, args []string) error {
			dir, err := oneArg(args, "DIR")
			if err != nil {
				return err
			}
			if *out == "" {
				*out = filepath.Join(dir, "policy.wasm")
			}
			abs, err := filepath.Abs(*out)
			if err != nil {
				return fmt.Errorf("output path: %w", err)
			}
			goTool := os.Getenv("GO")
			if goTool == "" {
				goTool = "go"
			}
			cmd := exec.CommandContext(ctx, goTool, "build", "-buildmode=c-shared", "-trimpath", "-ldflags=-s -w", "-o", abs, ".")
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
			cmd.Stdout, cmd.Stderr = s.err, s.err
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("go build for wasip1 in %s: %w", dir, err)
			}
			info, err := os.Stat(abs)
			if err != nil {
				return fmt.Errorf("built module: %w", err)
			}
			_, err = fmt.Fprintf(s.out, "%s: %d bytes\n", *out, info.Size())
			return err
		}
	},
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
