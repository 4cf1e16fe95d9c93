package wasmtest_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/plugins/wasm/wasmtest"
)

func TestCustomSections(t *testing.T) {
	header := "\x00asm\x01\x00\x00\x00"
	for _, tc := range []struct {
		name, module string
		want         []string
	}{
		{"none", header, nil},
		{"name and producers around a type section", header + "\x00\x05\x04name" + "\x01\x01\x00" + "\x00\x0a\x09producers", []string{"name", "producers"}},
		{"truncated section", header + "\x00\x05\x04name" + "\x00\x7f\x04more", []string{"name"}},
		{"name longer than its section", header + "\x00\x02\x7fname", nil},
	} {
		if diff := cmp.Diff(tc.want, wasmtest.CustomSections([]byte(tc.module))); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}
