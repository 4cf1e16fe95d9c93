package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/switchyard-lb/switchyard/plugins/registry"
	"github.com/switchyard-lb/switchyard/plugins/wasm/wasmtest"
)

// zoneAware is the SDK's zone-aware example, built by TestMain.
var zoneAware string

func TestMain(m *testing.M) {
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

func TestPolicyPack(t *testing.T) {
	mod, err := os.ReadFile(zoneAware)
	if err != nil {
		t.Fatal(err)
	}
	params := writeFile(t, "p.json", `{"localWeight": 3}`+"\n")
	tiny := writeFile(t, "tiny.wasm", "\x00asm\x01\x00\x00\x00")
	for _, tc := range []struct {
		name    string
		file    string
		args    []string
		wantKey string
		json    bool
	}{
		{"small stays plain", tiny, nil, registry.KeyModule, false},
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
}

func TestPolicyBench(t *testing.T) {
	code, stdout, stderr := yardctl(t, "policy", "bench", zoneAware, "--endpoints", "100", "--duration", "1ms", "-o", "json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var res struct{ Endpoints, Evaluations int }
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatal(err)
	}
	if res.Endpoints != 100 || res.Evaluations < 1 {
		t.Errorf("bench = %+v, want 100 endpoints and at least one evaluation", res)
	}
}

func TestPolicyBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go tool")
	}
	out := filepath.Join(t.TempDir(), "p.wasm")
	code, stdout, stderr := yardctl(t, "policy", "build", "../../wasm-sdk/go/examples/zoneaware", "--out", out)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, out) {
		t.Errorf("stdout %q does not name %s", stdout, out)
	}
	if code, _, stderr := yardctl(t, "policy", "validate", out); code != exitOK {
		t.Errorf("the built module does not validate: %s", stderr)
	}
	if code, _, stderr := yardctl(t, "policy", "build", t.TempDir()); code != exitError || !strings.Contains(stderr, "go build for wasip1") {
		t.Errorf("empty dir: exit %d, %q", code, stderr)
	}
}

func TestPolicyHelp(t *testing.T) {
	for _, sub := range []string{"build", "validate", "test", "bench", "pack"} {
		code, _, stderr := yardctl(t, "policy", sub, "--help")
		if code != exitOK || !strings.Contains(stderr, "Usage: yardctl policy "+sub) {
			t.Errorf("policy %s --help: exit %d, %q", sub, code, stderr)
		}
	}
	if code, stdout, _ := yardctl(t, "help", "policy"); code != exitOK || !strings.Contains(stdout, "pack FILE --name N") {
		t.Errorf("help policy: exit %d, %q", code, stdout)
	}
	if code, _, stderr := yardctl(t, "policy", "frobnicate"); code != exitUsage || !strings.Contains(stderr, `unknown subcommand "frobnicate"`) {
		t.Errorf("unknown subcommand: exit %d, %q", code, stderr)
	}
}
