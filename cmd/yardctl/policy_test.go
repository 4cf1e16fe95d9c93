package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/switchyard-lb/switchyard/plugins/registry"
	"github.com/switchyard-lb/switchyard/plugins/wasm/wasmtest"
)

// zoneAware and canary are the SDK's zone-aware and canary examples,
// built by TestMain.
var zoneAware, canary string

func TestMain(m *testing.M) {
	instantiateDeadline = generousTestDeadline
	root, err := filepath.Abs("../..")
	if err == nil {
		var b []byte
		b, err = wasmtest.BuildGo(root, filepath.Join(root, "wasm-sdk/go/examples/zoneaware"), filepath.Join(root, "wasm-sdk/go/policy"))
		if err == nil {
			dir, derr := os.MkdirTemp("", "yardctl-test-")
			err = derr
			if err == nil {
				zoneAware = filepath.Join(dir, "zoneaware.wasm")
				err = os.WriteFile(zoneAware, b, 0o644)
				defer os.RemoveAll(dir)
			}
			if err == nil {
				b, err = wasmtest.BuildGo(root, filepath.Join(root, "wasm-sdk/go/examples/canary"), filepath.Join(root, "wasm-sdk/go/policy"))
			}
			if err == nil {
				canary = filepath.Join(dir, "canary.wasm")
				err = os.WriteFile(canary, b, 0o644)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "build the example policy:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(filepath.Dir(zoneAware))
	os.Exit(code)
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPolicyValidate(t *testing.T) {
	mod, err := os.ReadFile(zoneAware)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{"valid", []string{zoneAware}, exitOK, "valid ABI v1 policy, " + fmt.Sprint(len(mod)) + " bytes, sha256 " + registry.Digest(mod), ""},
		{"garbage", []string{writeFile(t, "g.wasm", "garbage")}, exitError, "", "is not a valid policy: load policy \"g.wasm\": invalid policy module: compile: invalid magic number"},
		{"missing file", []string{"/nonexistent.wasm"}, exitError, "", "read module: open /nonexistent.wasm"},
		{"no file", nil, exitUsage, "", "missing FILE"},
		{"two files", []string{zoneAware, zoneAware}, exitUsage, "", "unexpected argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := yardctl(t, append([]string{"policy", "validate"}, tc.args...)...)
			if code != tc.wantCode || !strings.Contains(stdout, tc.wantStdout) || !strings.Contains(stderr, tc.wantStderr) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q",
					code, stdout, stderr, tc.wantCode, tc.wantStdout, tc.wantStderr)
			}
		})
	}
}

const scenarioYAML = `service: {namespace: default, name: web, port: {name: http, protocol: TCP, port: 80}, params: '{"localWeight": 7}'}
node: {name: node-a, zone: zone-a}
endpoints:
- {address: 10.0.0.1, port: 8080, node: node-a, zone: zone-a, stats: {activeConns: 5}}
- {address: 10.0.1.1, port: 8080, node: node-b, zone: zone-b}
- {address: 10.0.1.2, port: 8080, node: node-b, zone: zone-b, ready: false}
`

func TestPolicyTest(t *testing.T) {
	sc := writeFile(t, "s.yaml", scenarioYAML)
	code, stdout, stderr := yardctl(t, "policy", "test", zoneAware, "--scenario", sc)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := []string{
		"ENDPOINT NODE ZONE WEIGHT",
		"10.0.0.1:8080 node-a zone-a 7",
		"10.0.1.1:8080 node-b zone-b 0",
		"10.0.1.2:8080 node-b zone-b 0",
		"scheduler: wrr",
		"reevaluate: 10s",
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(stdout), "\n") {
		got = append(got, strings.Join(strings.Fields(l), " "))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("policy test (-want +got):\n%s", diff)
	}

	code, stdout, stderr = yardctl(t, "policy", "test", "-o", "json", zoneAware, "--scenario", sc)
	if code != exitOK {
		t.Fatalf("-o json: exit %d: %s", code, stderr)
	}
	var d decisionJSON
	if err := json.Unmarshal([]byte(stdout), &d); err != nil {
		t.Fatal(err)
	}
	var weights []uint32
	for _, e := range d.Endpoints {
		weights = append(weights, e.Weight)
	}
	if diff := cmp.Diff([]uint32{7, 0, 0}, weights); diff != "" || d.Scheduler != "wrr" || d.ReevaluateMs != 10000 {
		t.Errorf("-o json: %+v (weights -want +got:\n%s)", d, diff)
	}

	for _, tc := range []struct{ name, scenario, want string }{
		{"unknown field", "service: {nme: x}\n", "unknown field"},
		{"bad address", "endpoints: [{address: nope}]\n", "endpoints[0].address"},
		{"bad params", "service: {params: '{'}\n", "service.params is not valid JSON"},
	} {
		code, _, stderr := yardctl(t, "policy", "test", zoneAware, "--scenario", writeFile(t, "bad.yaml", tc.scenario))
		if code != exitError || !strings.Contains(stderr, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want exit 1 with %q", tc.name, code, stderr, tc.want)
		}
	}
	if code, _, stderr := yardctl(t, "policy", "test", zoneAware); code != exitUsage || !strings.Contains(stderr, "--scenario is required") {
		t.Errorf("without --scenario: exit %d, %q", code, stderr)
	}
}

func TestPolicyValidateParams(t *testing.T) {
	sc := writeFile(t, "s.yaml", `service: {params: {canary: zone=zone-b, percent: 20}}
node: {name: node-a, zone: zone-a}
endpoints:
- {address: 10.0.0.1, zone: zone-a}
- {address: 10.0.1.1, zone: zone-b}
expect: {shares: [0.8, 0.2]}
`)
	noParams := writeFile(t, "n.yaml", `node: {name: node-a, zone: zone-a}
endpoints:
- {address: 10.0.0.1, zone: zone-a}
- {address: 10.0.1.1, zone: zone-b}
expect: {shares: [0.8, 0.2]}
`)
	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
		want     string
	}{
		{"canary without params", nil, exitError,
			`fails on the built-in sample scenario (two endpoints, no parameters: give them with --params): policy declined: params: canary is missing`},
		{"inline params", []string{"--params", `{"canary": "zone=zone-b"}`}, exitOK, "valid ABI v1 policy"},
		{"params file", []string{"--params", writeFile(t, "p.json", `{"canary": "node=node-b", "percent": 5}`)}, exitOK, "valid ABI v1 policy"},
		{"params rejected", []string{"--params", `{"canary": "rack=1"}`}, exitError, "params: canary must be zone=<zone>"},
		{"scenario with its params and expectations", []string{"--scenario", sc}, exitOK, "valid ABI v1 policy"},
		{"a scenario keeps its own params", []string{"--scenario", sc, "--params", `{"canary": "zone=zone-b", "percent": 50}`}, exitOK, "valid ABI v1 policy"},
		{"then --params go to the built-in scenario", []string{"--scenario", sc, "--params", `{"canary": "rack=1"}`}, exitError,
			`fails on the built-in sample scenario (two endpoints, parameters {"canary": "rack=1"}): policy declined: params: canary must be zone=<zone>`},
		{"--params go to a scenario without its own", []string{"--scenario", noParams, "--params", `{"canary": "zone=zone-b", "percent": 50}`}, exitError,
			"misses the expectations of " + noParams + ":\n  10.0.0.1:0 (zone-a): share 0.500 (weight 5000 of 10000), want 0.8 ± 0.01\n  10.0.1.1:0 (zone-b): share 0.500 (weight 5000 of 10000), want 0.2 ± 0.01\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := yardctl(t, append([]string{"policy", "validate", canary}, tc.args...)...)
			if code != tc.wantCode || !strings.Contains(stdout+stderr, tc.want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d with %q", code, stdout, stderr, tc.wantCode, tc.want)
			}
		})
	}
}

func TestPolicyPack(t *testing.T) {
	mod, err := os.ReadFile(zoneAware)
	if err != nil {
		t.Fatal(err)
	}
	params := writeFile(t, "p.json", `{"localWeight": 3}`+"\n")
	for _, tc := range []struct {
		name    string
		file    string
		args    []string
		wantKey string
		json    bool
	}{
		{"large is compressed", zoneAware, nil, registry.KeyModuleGzip, false},
		{"json", zoneAware, []string{"-o", "json"}, registry.KeyModuleGzip, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mod, err := os.ReadFile(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			args := append([]string{"policy", "pack", tc.file, "--name", "zone", "--params", params}, tc.args...)
			code, stdout, stderr := yardctl(t, args...)
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			var cm corev1.ConfigMap
			if tc.json {
				err = json.Unmarshal([]byte(stdout), &cm)
			} else {
				err = sigsyaml.Unmarshal([]byte(stdout), &cm)
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := cm.BinaryData[tc.wantKey]; !ok || len(cm.BinaryData) != 1 {
				t.Errorf("binaryData keys %v, want only %s", cm.BinaryData, tc.wantKey)
			}
			if cm.Name != "zone" || cm.Namespace != registry.DefaultNamespace || cm.Labels[registry.Label] != "true" {
				t.Errorf("ConfigMap %s/%s labels %v", cm.Namespace, cm.Name, cm.Labels)
			}
			got, gotParams, err := registry.Decode(&cm, registry.DefaultMaxModuleSize)
			if err != nil {
				t.Fatalf("the daemon's decoder refuses the packed ConfigMap: %v", err)
			}
			if string(got) != string(mod) || string(gotParams) != `{"localWeight": 3}` || cm.Data[registry.KeyPin] != registry.Digest(mod) {
				t.Errorf("round trip: module equal %v, params %q, pin %q", string(got) == string(mod), gotParams, cm.Data[registry.KeyPin])
			}
		})
	}
	if code, _, stderr := yardctl(t, "policy", "pack", zoneAware, "--name", "x", "--gzip-over", fmt.Sprint(len(mod))); code != exitError || !strings.Contains(stderr, "module too large for a ConfigMap") {
		t.Errorf("too large uncompressed: exit %d, %q", code, stderr)
	}
	if code, _, stderr := yardctl(t, "policy", "pack", zoneAware); code != exitUsage || !strings.Contains(stderr, "--name is required") {
		t.Errorf("without --name: exit %d, %q", code, stderr)
	}
	if code, _, stderr := yardctl(t, "policy", "pack", zoneAware, "--name", "x", "--params", writeFile(t, "b.json", "{")); code != exitError || !strings.Contains(stderr, "not valid JSON") {
		t.Errorf("bad params: exit %d, %q", code, stderr)
	}

	// A module at most --gzip-over bytes stays plain (no module that small
	// is a policy the command line would pack: packPolicy is called
	// directly).
	tiny := []byte("\x00asm\x01\x00\x00\x00")
	cm, err := packPolicy(tiny, "tiny", registry.DefaultNamespace, nil, DefaultGzipOver)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := cm.BinaryData[registry.KeyModule]; !ok || len(cm.BinaryData) != 1 || string(got) != string(tiny) {
		t.Errorf("small module: binaryData %v, want only %s", cm.BinaryData, registry.KeyModule)
	}
}

// trapWasm is a hand-assembled ABI v1 module whose sy_evaluate executes
// unreachable: it loads and traps on every evaluation.
const trapWasm = "0061736d01000000010f0360000060017f017f60027f7f017e0304030001020503010001072f04066d656d6f72790200" +
	"0973795f6162695f763100000873795f616c6c6f6300010b73795f6576616c7561746500020a0e0302000b05004180080b0300000b"

func trapModule(t *testing.T) string {
	t.Helper()
	b, err := hex.DecodeString(trapWasm)
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, "trap.wasm", string(b))
}

func TestPolicyPackRefuses(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
		want     string
	}{
		{"go source", []string{writeFile(t, "main.go", "package main\n"), "--name", "x"}, exitError,
			`main.go is not a WebAssembly module (it starts with "package main\n"`},
		{"trap", []string{trapModule(t), "--name", "x"}, exitError, "not packed: " + "/"},
		{"trap names it", []string{trapModule(t), "--name", "x"}, exitError,
			"(two endpoints, no parameters): policy trapped: sy_evaluate: wasm error: unreachable\nwasm stack trace:\n\t.$2(i32,i32) i64\n"},
		{"params the policy rejects", []string{zoneAware, "--name", "x", "--params", `{"localWeight": "seven"}`}, exitError,
			`fails on the built-in sample scenario (two endpoints, parameters {"localWeight": "seven"}): policy declined: params: localWeight is not an integer`},
		{"invalid name", []string{zoneAware, "--name", "Least_Loaded"}, exitUsage,
			`--name "Least_Loaded" is not a valid ConfigMap name: a lowercase RFC 1123 subdomain`},
		{"invalid name suggestion", []string{zoneAware, "--name", "Least_Loaded"}, exitUsage, `(for example "least-loaded")`},
		{"expectation missed", []string{zoneAware, "--name", "x", "--scenario", writeFile(t, "s.yaml", scenarioYAML+"expect: {weights: [1, 0, 0]}\n")}, exitError,
			"misses the expectations of"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := yardctl(t, append([]string{"policy", "pack"}, tc.args...)...)
			if code != tc.wantCode || stdout != "" || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d, no stdout, stderr with %q", code, stdout, stderr, tc.wantCode, tc.want)
			}
		})
	}
}

func TestPolicyBench(t *testing.T) {
	// The runs measure under a generous deadline (a loaded machine must not
	// fail them); the default is the daemon's, as --help says.
	if _, _, stderr := yardctl(t, "policy", "bench", "--help"); !strings.Contains(stderr, "the daemon's policies.evaluationDeadline default (default 50ms)") {
		t.Errorf("bench --help does not give the daemon's 50ms default deadline:\n%s", stderr)
	}
	code, stdout, stderr := yardctl(t, "policy", "bench", zoneAware, "--endpoints", "100", "--duration", "1ms", "--deadline", "2m", "-o", "json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var res benchResult
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatal(err)
	}
	if res.Endpoints != 100 || res.Evaluations < 1 || res.DeadlineMs != 120000 ||
		res.P50Ns <= 0 || res.P50Ns > res.P90Ns || res.P90Ns > res.P99Ns || res.P99Ns > res.MaxNs {
		t.Errorf("bench = %+v, want 100 endpoints, at least one evaluation, the 2m deadline and ordered percentiles", res)
	}
	code, stdout, stderr = yardctl(t, "policy", "bench", zoneAware, "--duration", "1ms", "--deadline", "2m")
	for _, want := range []string{"50 endpoints: ", "evaluations under a 2m0s deadline\nper evaluation: mean ", ", p50 ", ", p99 ", "host allocations per evaluation: "} {
		if code != exitOK || !strings.Contains(stdout, want) {
			t.Errorf("text: exit %d, stdout %q, stderr %q; want %q", code, stdout, stderr, want)
		}
	}
	if code, _, stderr := yardctl(t, "policy", "bench", zoneAware, "--duration", "1ms", "--deadline", "1ns"); code != exitError || !strings.Contains(stderr, "deadline") {
		t.Errorf("--deadline 1ns: exit %d, stderr %q; want a deadline failure", code, stderr)
	}
}

func TestPolicyBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the compilers")
	}
	rustStd := func() bool {
		out, err := exec.Command("/usr/bin/rustc", "--print", "sysroot").Output()
		return err == nil && fileExists(filepath.Join(strings.TrimSpace(string(out)), "lib/rustlib/wasm32-unknown-unknown"))
	}
	asc := func() bool { return fileExists("../../wasm-sdk/assemblyscript/node_modules/.bin/asc") }
	for _, tc := range []struct {
		lang, src string
		have      func() bool
	}{
		{"go", "../../wasm-sdk/go/examples/zoneaware", func() bool { return true }},
		{"rust", "../../wasm-sdk/rust/examples/zoneaware.rs", rustStd},
		{"assemblyscript", "../../wasm-sdk/assemblyscript/examples/zoneaware.ts", asc},
	} {
		t.Run(tc.lang, func(t *testing.T) {
			if !tc.have() {
				t.Skipf("no %s toolchain: make wasm-sdk-examples installs it", tc.lang)
			}
			strips := []bool{false, true}
			if tc.lang == "assemblyscript" {
				strips = strips[:1] // asc is slow; the Go and Rust builds cover --strip
			}
			for _, strip := range strips {
				out := filepath.Join(t.TempDir(), "p.wasm")
				args := []string{"policy", "build", tc.src, "--out", out}
				if strip {
					args = append(args, "--strip")
				}
				code, stdout, stderr := yardctl(t, args...)
				if code != exitOK {
					t.Fatalf("%v: exit %d: %s", args, code, stderr)
				}
				if !strings.Contains(stdout, out) || !strings.Contains(stdout, "("+tc.lang+")") {
					t.Errorf("stdout %q does not name %s and %s", stdout, out, tc.lang)
				}
				sections := wasmtest.CustomSections(mustRead(t, out))
				if names := slices.Contains(sections, "name"); names == strip {
					t.Errorf("--strip=%v: custom sections %v (a name section: %v)", strip, sections, names)
				}
				if code, _, stderr := yardctl(t, "policy", "test", out, "--scenario", "../../wasm-sdk/scenarios/zoneaware", "--deadline", "1s"); code != exitOK {
					t.Errorf("the built module misses the example's expectations: %s", stderr)
				}
			}
		})
	}

	broken := t.TempDir()
	if err := os.WriteFile(filepath.Join(broken, "main.go"), []byte("package main\nfunc main() { undefined() }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A rustc without the wasm32 standard library (rustup's, say).
	sysroot := t.TempDir()
	noWasmRustc := writeFile(t, "rustc", "#!/bin/sh\necho "+sysroot+"\n")
	if err := os.Chmod(noWasmRustc, 0o755); err != nil {
		t.Fatal(err)
	}
	mixed := t.TempDir()
	for _, f := range []string{"a.rs", "b.ts"} {
		if err := os.WriteFile(filepath.Join(mixed, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
		want     string
	}{
		{"empty dir", []string{t.TempDir()}, exitError, "holds no policy source (.go, .rs or .ts files)"},
		{"go that does not compile", []string{broken}, exitError, "go build for wasip1 in " + broken},
		{"two languages", []string{mixed}, exitUsage, "holds rust and assemblyscript sources: choose one with --lang"},
		{"unknown extension", []string{writeFile(t, "p.c", "")}, exitError, "cannot tell the language from the file name"},
		{"unknown --lang", []string{mixed, "--lang", "c"}, exitUsage, `--lang "c": want go, rust or assemblyscript`},
		{"rustc without wasm32", []string{"../../wasm-sdk/rust/examples/zoneaware.rs"}, exitError,
			"rust build: " + noWasmRustc + " has no wasm32-unknown-unknown standard library (none in " + filepath.Join(sysroot, "lib", "rustlib") +
				"): on Debian or Ubuntu apt-get install rustc libstd-rust-dev-wasm32"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("RUSTC", noWasmRustc)
			code, _, stderr := yardctl(t, append([]string{"policy", "build"}, tc.args...)...)
			if code != tc.wantCode || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit %d with %q", code, stderr, tc.wantCode, tc.want)
			}
		})
	}
}

func TestPolicyHelp(t *testing.T) {
	for _, sub := range []string{"build", "validate", "test", "bench", "pack", "apply"} {
		code, _, stderr := yardctl(t, "policy", sub, "--help")
		if code != exitOK || !strings.Contains(stderr, "Usage: yardctl policy "+sub) {
			t.Errorf("policy %s --help: exit %d, %q", sub, code, stderr)
		}
	}
	if code, stdout, _ := yardctl(t, "help", "policy"); code != exitOK || !strings.Contains(stdout, "pack FILE --name N") || !strings.Contains(stdout, "apply FILE|SOURCE --name N") {
		t.Errorf("help policy: exit %d, %q", code, stdout)
	}
	if code, _, stderr := yardctl(t, "policy", "frobnicate"); code != exitUsage || !strings.Contains(stderr, `unknown subcommand "frobnicate"`) {
		t.Errorf("unknown subcommand: exit %d, %q", code, stderr)
	}
}

func TestPolicyTestExpectations(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pass := write("a-pass.yaml", scenarioYAML+"expect: {weights: [7, 0, 0], scheduler: wrr, reevaluate: 10s}\n")
	shares := write("b-shares.yaml", scenarioYAML+"expect:\n  shares: [1, 0, 0]\n")
	wrong := write("c-wrong.yaml", scenarioYAML+"expect:\n  weights: [8, 0, 0]\n  scheduler: mh\n")
	none := write("d-none.yaml", scenarioYAML)

	code, stdout, stderr := yardctl(t, "policy", "test", zoneAware, "--scenario", pass)
	if code != exitOK || !strings.HasSuffix(stdout, "reevaluate: 10s\nexpect: pass\n") {
		t.Errorf("passing scenario: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	code, stdout, stderr = yardctl(t, "policy", "test", zoneAware, "--scenario", wrong)
	wantDiff := "expect: FAIL\n  10.0.0.1:8080 (node-a, zone-a): weight 7, want 8\n  scheduler wrr, want mh\n"
	if code != exitError || !strings.HasSuffix(stdout, wantDiff) || stderr != "yardctl: 1 of 1 scenarios failed their expectations\n" {
		t.Errorf("wrong expectation: exit %d, stdout %q, stderr %q; want exit 1, stdout ending %q", code, stdout, stderr, wantDiff)
	}

	code, stdout, stderr = yardctl(t, "policy", "test", zoneAware, "--scenario", dir)
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(stdout), "\n") {
		got = append(got, strings.Join(strings.Fields(l), " "))
	}
	want := []string{
		"SCENARIO RESULT DECISION",
		"a-pass.yaml pass weights [7 0 0] scheduler wrr reevaluate 10s",
		"b-shares.yaml pass weights [7 0 0] scheduler wrr reevaluate 10s",
		"c-wrong.yaml FAIL weights [7 0 0] scheduler wrr reevaluate 10s",
		"d-none.yaml - weights [7 0 0] scheduler wrr reevaluate 10s",
		"",
		wrong + ":",
		"10.0.0.1:8080 (node-a, zone-a): weight 7, want 8",
		"scheduler wrr, want mh",
	}
	if diff := cmp.Diff(want, got); diff != "" || code != exitError || !strings.Contains(stderr, "1 of 4 scenarios failed") {
		t.Errorf("directory: exit %d, stderr %q, stdout (-want +got):\n%s", code, stderr, diff)
	}

	code, stdout, _ = yardctl(t, "policy", "test", "-o", "json", zoneAware, "--scenario", dir)
	var all struct {
		Scenarios []decisionJSON
		Failed    int
	}
	if err := json.Unmarshal([]byte(stdout), &all); err != nil {
		t.Fatalf("-o json: %v: %q", err, stdout)
	}
	var results []string
	for _, d := range all.Scenarios {
		results = append(results, filepath.Base(d.Scenario)+" "+d.Result)
	}
	if diff := cmp.Diff([]string{"a-pass.yaml pass", "b-shares.yaml pass", "c-wrong.yaml fail", "d-none.yaml "}, results); diff != "" || all.Failed != 1 || code != exitError {
		t.Errorf("-o json: exit %d, failed %d, results (-want +got):\n%s", code, all.Failed, diff)
	}

	// Golden mode records the decisions, keeping the rest of each file.
	withComment := write("c-wrong.yaml", "# the zone-aware example keeps traffic local\n"+scenarioYAML+"expect:\n  weights: [8, 0, 0] # wrong\n  scheduler: mh\n")
	if code, _, stderr := yardctl(t, "policy", "test", zoneAware, "--scenario", dir, "--update"); code != exitOK {
		t.Fatalf("--update: exit %d: %s", code, stderr)
	}
	b, err := os.ReadFile(withComment)
	if err != nil {
		t.Fatal(err)
	}
	wantFile := "# the zone-aware example keeps traffic local\n" + scenarioYAML +
		"expect:\n  weights: [7, 0, 0]\n  scheduler: wrr\n  reevaluate: 10s\n"
	if diff := cmp.Diff(wantFile, string(b)); diff != "" {
		t.Errorf("--update wrote (-want +got):\n%s", diff)
	}
	if code, stdout, stderr := yardctl(t, "policy", "test", zoneAware, "--scenario", dir); code != exitOK || strings.Contains(stdout, "FAIL") {
		t.Errorf("after --update: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	for _, p := range []string{shares, none} {
		if b, err := os.ReadFile(p); err != nil || !strings.HasSuffix(string(b), "expect:\n  weights: [7, 0, 0]\n  scheduler: wrr\n  reevaluate: 10s\n") {
			t.Errorf("--update left %s as %q (%v)", p, b, err)
		}
	}
}

// TestPolicyTestFailure: a policy that fails otherwise than by declining
// (here a trap) is reported as failed, not declined.
func TestPolicyTestFailure(t *testing.T) {
	sc := "endpoints: [{address: 10.0.0.1}]\nexpect: {decline: unreachable}\n"
	file := writeFile(t, "s.yaml", sc)
	code, stdout, stderr := yardctl(t, "policy", "test", trapModule(t), "--scenario", file)
	if code != exitOK || !strings.HasPrefix(stdout, "failed: policy trapped: ") || strings.Contains(stdout, "declined") {
		t.Errorf("one scenario: exit %d, stdout %q, stderr %q; want exit 0 and \"failed: policy trapped: ...\"", code, stdout, stderr)
	}
	dir := t.TempDir()
	for _, name := range []string{"a.yaml", "b.yaml"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(sc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, stdout, stderr = yardctl(t, "policy", "test", trapModule(t), "--scenario", dir)
	if code != exitOK || !strings.Contains(stdout, " pass    failed: policy trapped: ") || strings.Contains(stdout, "declined") {
		t.Errorf("a directory: exit %d, stdout %q, stderr %q; want exit 0 and \"failed: policy trapped: ...\" in the table", code, stdout, stderr)
	}
}

func TestPolicyTestDecline(t *testing.T) {
	base := "endpoints: [{address: 10.0.0.1}]\n"
	for _, tc := range []struct {
		name, scenario string
		wantCode       int
		wantStdout     string
	}{
		{"decline expected", base + "expect: {decline: canary is missing}\n", exitOK,
			"declined: params: canary is missing\nexpect: pass\n"},
		{"other message", base + "expect: {decline: percent is above 100}\n", exitError,
			"expect: FAIL\n  the policy failed with \"policy declined: params: canary is missing\", want a decline with \"percent is above 100\"\n"},
		{"decision expected", base + "expect: {weights: [1]}\n", exitError,
			"expect: FAIL\n  the policy failed: policy declined: params: canary is missing; want a decision\n"},
		{"decline expected, decided", "service: {params: '{\"canary\": \"zone=a\"}'}\n" + base + "expect: {decline: canary}\n", exitError,
			"expect: FAIL\n  the policy decided (weights [100]), want a decline with \"canary\"\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := yardctl(t, "policy", "test", canary, "--scenario", writeFile(t, "s.yaml", tc.scenario))
			if code != tc.wantCode || !strings.HasSuffix(stdout, tc.wantStdout) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d, stdout ending %q", code, stdout, stderr, tc.wantCode, tc.wantStdout)
			}
		})
	}
}

func TestPolicyErrorsAsJSON(t *testing.T) {
	for _, args := range [][]string{
		{"policy", "test", "-o", "json", zoneAware, "--scenario", "/nonexistent.yaml"},
		{"policy", "validate", "-o", "json", "/nonexistent.wasm"},
		{"policy", "pack", "-o", "json", zoneAware},
	} {
		code, stdout, stderr := yardctl(t, args...)
		var e struct {
			Error    string
			ExitCode int
		}
		if err := json.Unmarshal([]byte(stdout), &e); err != nil || e.Error == "" || e.ExitCode != code || code == exitOK || !strings.Contains(stderr, e.Error) {
			t.Errorf("%v: exit %d, stdout %q (%v), stderr %q; want the error as JSON on stdout", args, code, stdout, err, stderr)
		}
	}
}

func TestPolicyScenarioErrorKeepsItsLines(t *testing.T) {
	sc := writeFile(t, "s.yaml", "endpoints:\n- address: 10.0.0.1\n  port: http\n")
	code, _, stderr := yardctl(t, "policy", "test", zoneAware, "--scenario", sc)
	want := "yardctl: scenario " + sc + ", line 3: field port: \"http\" is not a whole number from 0 to 65535\n" +
		"   1 | endpoints:\n   2 | - address: 10.0.0.1\n>  3 |   port: http\n               ^\n"
	if diff := cmp.Diff(want, stderr); diff != "" || code != exitError {
		t.Errorf("exit %d, stderr (-want +got):\n%s", code, diff)
	}
}
