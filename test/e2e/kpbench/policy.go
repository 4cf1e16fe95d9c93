package kpbench

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The balancing policy parts of the benchmark: switchyard's default
// configuration has no policy (policies.default "": every Service is
// evaluated with builtin:uniform, as nothing in the configuration turns
// the policy stage off), SwitchyardLocalFirst gives every Service a
// non-default built-in policy through the cluster default, and
// SwitchyardWasm gives WasmServices Services a WebAssembly policy from a
// policy ConfigMap (the product's delivery: the ConfigMap in
// switchyard-system and the switchyard.dev/policy annotation).
const (
	// LocalFirstPolicy is the built-in policy of SwitchyardLocalFirst.
	LocalFirstPolicy = "builtin:local-first"
	// WasmPolicy names the policy ConfigMap of SwitchyardWasm.
	WasmPolicy = "kpbench-wasm"
	// WasmServices is how many Services SwitchyardWasm annotates (all
	// of them in a smaller workload): the first ones.
	WasmServices = 100
	// PolicyNamespace, PolicyLabel, PolicyAnnotation, PolicyModuleGzip:
	// the delivery's names (product.md, "Policy ConfigMaps").
	PolicyNamespace  = "switchyard-system"
	PolicyLabel      = "switchyard.dev/policy"
	PolicyAnnotation = "switchyard.dev/policy"
	PolicyModuleGzip = "policy.wasm.gz"
)

// SwitchyardLocalFirstConfig is SwitchyardConfig with LocalFirstPolicy as
// the cluster default policy, so that every Service runs it.
const SwitchyardLocalFirstConfig = SwitchyardConfig + `policies:
  default: ` + LocalFirstPolicy + `
`

// PolicyParts maps each switchyard part that differs from the default in
// its policies to a short column header.
var PolicyParts = []struct{ Name, Header string }{
	{Switchyard, "no policy"},
	{SwitchyardLocalFirst, "local-first"},
	{SwitchyardWasm, "wasm x100"},
}

// GzipModule compresses a WebAssembly module for a policy ConfigMap's
// binaryData (a Go module is above a ConfigMap's 1 MiB limit unpacked).
func GzipModule(module []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(module); err != nil {
		return nil, fmt.Errorf("gzip the policy module: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("gzip the policy module: %w", err)
	}
	return buf.Bytes(), nil
}

// PolicyConfigMap is WasmPolicy's ConfigMap holding the gzipped module.
func PolicyConfigMap(moduleGzip []byte) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: WasmPolicy, Namespace: PolicyNamespace,
			Labels: map[string]string{PolicyLabel: "true"},
		},
		BinaryData: map[string][]byte{PolicyModuleGzip: moduleGzip},
	}
}

// PolicyPatch is the merge patch setting a Service's policy annotation
// to policy, or removing it when policy is "".
func PolicyPatch(policy string) []byte {
	var v any
	if policy != "" {
		v = policy
	}
	data, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{PolicyAnnotation: v}}})
	return data
}
