package kpbench

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/config"
)

func TestPolicyConfigMap(t *testing.T) {
	module := bytes.Repeat([]byte("\x00asm\x01\x00\x00\x00"), 1000)
	gz, err := GzipModule(module)
	if err != nil {
		t.Fatal(err)
	}
	cm := PolicyConfigMap(gz)
	if cm.Namespace != "switchyard-system" || cm.Labels["switchyard.dev/policy"] != "true" || cm.Name != WasmPolicy {
		t.Errorf("ConfigMap %s/%s labels %v: want switchyard-system, switchyard.dev/policy=true", cm.Namespace, cm.Name, cm.Labels)
	}
	zr, err := gzip.NewReader(bytes.NewReader(cm.BinaryData["policy.wasm.gz"]))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, module) {
		t.Errorf("binaryData policy.wasm.gz does not hold the module")
	}
}

func TestPolicyPatch(t *testing.T) {
	for _, tc := range []struct {
		policy string
		want   any
	}{
		{policy: "kpbench-wasm", want: "kpbench-wasm"},
		{policy: "", want: nil}, // removes the annotation (merge patch)
	} {
		var patch struct {
			Metadata struct {
				Annotations map[string]any `json:"annotations"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(PolicyPatch(tc.policy), &patch); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(map[string]any{"switchyard.dev/policy": tc.want}, patch.Metadata.Annotations); diff != "" {
			t.Errorf("PolicyPatch(%q) annotations (-want +got):\n%s", tc.policy, diff)
		}
	}
}

// The daemon's own parser reads both configurations, the second with the
// built-in policy as the cluster default.
func TestSwitchyardConfigs(t *testing.T) {
	for _, tc := range []struct {
		name, data, policy string
	}{
		{name: "default", data: SwitchyardConfig, policy: ""},
		{name: "local-first", data: SwitchyardLocalFirstConfig, policy: LocalFirstPolicy},
	} {
		cfg, err := config.Parse([]byte(tc.data))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if cfg.Policies.Default != tc.policy || cfg.Dataplane.Mode != "ipvs" {
			t.Errorf("%s: policies.default %q, dataplane.mode %q; want %q, ipvs", tc.name, cfg.Policies.Default, cfg.Dataplane.Mode, tc.policy)
		}
	}
}
