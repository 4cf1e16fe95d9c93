package policy_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/switchyard-lb/switchyard/wasm-sdk/go/policy"
)

func TestParamBool(t *testing.T) {
	for _, tt := range []struct {
		params string
		want   bool
		err    string
	}{
		{"", true, ""},
		{`{"other": false}`, true, ""},
		{`{"k": false}`, false, ""},
		{`{"k":true}`, true, ""},
		{`{"k": true , "x": 1}`, true, ""},
		{`{"k": "true"}`, false, "params: k is not true or false"},
		{`{"k": 1}`, false, "params: k is not true or false"},
		{`{"k": truest}`, false, "params: k is not true or false"},
		{`{"k": null}`, false, "params: k is not true or false"},
		{`[true]`, false, "params: not a JSON object"},
	} {
		got, err := policy.ParamBool([]byte(tt.params), "k", true)
		if tt.err != "" {
			if err == nil || err.Error() != tt.err {
				t.Errorf("ParamBool(%s) error = %v, want %q", tt.params, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParamBool(%s) = %v, %v; want %v", tt.params, got, err, tt.want)
		}
	}
}

func TestParamStrings(t *testing.T) {
	for _, tt := range []struct {
		params string
		want   []string
		found  bool
		err    string
	}{
		{"", nil, false, ""},
		{`{"other": ["a"]}`, nil, false, ""},
		{`{"k": []}`, nil, true, ""},
		{`{"k": [ ]}`, nil, true, ""},
		{`{"k": ["zone-a"]}`, []string{"zone-a"}, true, ""},
		{`{"k": [ "a" , "", "b c" ], "z": 1}`, []string{"a", "", "b c"}, true, ""},
		{`{"k": ["a", 1]}`, nil, true, "params: k is not a list of strings without escapes"},
		{`{"k": ["a\"b"]}`, nil, true, "params: k is not a list of strings without escapes"},
		{`{"k": "a"}`, nil, true, "params: k is not a list of strings without escapes"},
		{`{"k": ["a",]}`, nil, true, "params: k is not a list of strings without escapes"},
		{`{"k": ["a"`, nil, true, "params: k is not a list of strings without escapes"},
		{`{"k": [["a"]]}`, nil, true, "params: k is not a list of strings without escapes"},
		{`"x"`, nil, false, "params: not a JSON object"},
	} {
		l, found, err := policy.ParamStrings([]byte(tt.params), "k")
		if tt.err != "" {
			if err == nil || err.Error() != tt.err {
				t.Errorf("ParamStrings(%s) error = %v, want %q", tt.params, err, tt.err)
			}
			continue
		}
		var got []string
		for i, s := range l.All() {
			if i != len(got) {
				t.Errorf("ParamStrings(%s): index %d after %d elements", tt.params, i, len(got))
			}
			got = append(got, string(s))
		}
		if !slices.Equal(tt.want, got) || err != nil || found != tt.found || l.Len() != len(tt.want) {
			t.Errorf("ParamStrings(%s) = %q (len %d), found %v, %v; want %q, found %v", tt.params, got, l.Len(), found, err, tt.want, tt.found)
		}
		for _, s := range tt.want {
			if !l.Contains([]byte(s)) {
				t.Errorf("ParamStrings(%s).Contains(%q) = false", tt.params, s)
			}
		}
		if l.Contains([]byte("absent")) {
			t.Errorf("ParamStrings(%s).Contains(absent) = true", tt.params)
		}
	}
}

func TestParamUints(t *testing.T) {
	for _, tt := range []struct {
		params string
		want   []uint32
		found  bool
		err    string
	}{
		{"{}", nil, false, ""},
		{`{"k": []}`, nil, true, ""},
		{`{"k": [80, 443,0 , 4294967295]}`, []uint32{80, 443, 0, 4294967295}, true, ""},
		{`{"k": [4294967296]}`, nil, true, "params: k is not a list of integers from 0 to 4294967295"},
		{`{"k": [-1]}`, nil, true, "params: k is not a list of integers from 0 to 4294967295"},
		{`{"k": [1.5]}`, nil, true, "params: k is not a list of integers from 0 to 4294967295"},
		{`{"k": [1e3]}`, nil, true, "params: k is not a list of integers from 0 to 4294967295"},
		{`{"k": ["1"]}`, nil, true, "params: k is not a list of integers from 0 to 4294967295"},
		{`{"k": [01]}`, nil, true, "params: k is not a list of integers from 0 to 4294967295"},
		{`{"k": 1}`, nil, true, "params: k is not a list of integers from 0 to 4294967295"},
	} {
		l, found, err := policy.ParamUints([]byte(tt.params), "k")
		if tt.err != "" {
			if err == nil || err.Error() != tt.err {
				t.Errorf("ParamUints(%s) error = %v, want %q", tt.params, err, tt.err)
			}
			continue
		}
		var got []uint32
		for _, v := range l.All() {
			got = append(got, v)
		}
		if !slices.Equal(tt.want, got) || err != nil || found != tt.found || l.Len() != len(tt.want) {
			t.Errorf("ParamUints(%s) = %v (len %d), found %v, %v; want %v, found %v", tt.params, got, l.Len(), found, err, tt.want, tt.found)
		}
		if len(tt.want) > 0 && (!l.Contains(tt.want[0]) || l.Contains(7)) {
			t.Errorf("ParamUints(%s).Contains is wrong", tt.params)
		}
	}
}

func TestParamObject(t *testing.T) {
	params := []byte(`{"spill": {"at": 100, "zones": ["b"], "deep": {"on": true}}, "weight": 3, "bad": [1]}`)
	spill, found, err := policy.ParamObject(params, "spill")
	if err != nil || !found {
		t.Fatalf("ParamObject(spill) = %q, %v, %v", spill, found, err)
	}
	at, err := policy.ParamUint(spill, "at", 0)
	zones, _, zerr := policy.ParamStrings(spill, "zones")
	deep, _, derr := policy.ParamObject(spill, "deep")
	on, oerr := policy.ParamBool(deep, "on", false)
	if at != 100 || err != nil || zerr != nil || !zones.Contains([]byte("b")) || derr != nil || !on || oerr != nil {
		t.Errorf("nested: at %d (%v), zones %v (%v), deep %q (%v), on %v (%v)", at, err, zones, zerr, deep, derr, on, oerr)
	}
	if _, found, err := policy.ParamObject(params, "absent"); found || err != nil {
		t.Errorf("ParamObject(absent) = %v, %v", found, err)
	}
	for _, key := range []string{"weight", "bad"} {
		if _, _, err := policy.ParamObject(params, key); err == nil || err.Error() != "params: "+key+" is not an object" {
			t.Errorf("ParamObject(%s) error = %v", key, err)
		}
	}
	if _, _, err := policy.ParamObject([]byte(`{"k": {"a" 1}}`), "k"); err == nil || !strings.Contains(err.Error(), "k is not an object") {
		t.Errorf("ParamObject(malformed) error = %v", err)
	}
}

// The helpers promise no allocation on success.
func TestParamHelpersDoNotAllocate(t *testing.T) {
	params := []byte(`{"zones": ["a", "b", "c"], "ports": [80, 443], "on": true, "o": {"x": 1}}`)
	var sink int
	allocs := testing.AllocsPerRun(100, func() {
		zones, _, _ := policy.ParamStrings(params, "zones")
		for _, z := range zones.All() {
			sink += len(z)
		}
		if zones.Contains([]byte("c")) {
			sink++
		}
		ports, _, _ := policy.ParamUints(params, "ports")
		for _, p := range ports.All() {
			sink += int(p)
		}
		if on, _ := policy.ParamBool(params, "on", false); on {
			sink++
		}
		o, _, _ := policy.ParamObject(params, "o")
		x, _ := policy.ParamUint(o, "x", 0)
		sink += int(x)
	})
	if allocs != 0 {
		t.Errorf("the parameter helpers allocate %v times per call, want 0", allocs)
	}
	_ = slices.Clip([]int{sink})
}
