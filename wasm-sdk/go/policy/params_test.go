package policy_test

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/switchyard-lb/switchyard/wasm-sdk/go/policy"
)

func TestParamUint(t *testing.T) {
	tests := []struct {
		params string
		want   uint32
		err    string
	}{
		{"", 9, ""},
		{"  ", 9, ""},
		{"{}", 9, ""},
		{`{"k": 5}`, 5, ""},
		{`{"other": {"k": 1, "a": [1, "x", {"y": null}]}, "s": "k\"", "k": 0}`, 0, ""},
		{`{"a": true, "b": -1.5e3}`, 9, ""},
		{`{"k": 4294967295}`, 4294967295, ""},
		{`{"k": 4294967296}`, 0, "k is not an integer"},
		{`{"k": -1}`, 0, "k is not an integer"},
		{`{"k": 1.5}`, 0, "k is not an integer"},
		{`{"k": "5"}`, 0, "k is not an integer"},
		{`{"k": 01}`, 0, "k is not an integer"},
		{`[1]`, 0, "not a JSON object"},
		{`{"a" 1}`, 0, "missing ':'"},
		{`{"a": 1 "k": 2}`, 0, "missing ','"},
		{`{"a": {`, 0, "bad value"},
	}
	for _, tt := range tests {
		got, err := policy.ParamUint([]byte(tt.params), "k", 9)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParamUint(%s) error = %v, want %q", tt.params, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParamUint(%s) = %d, %v; want %d", tt.params, got, err, tt.want)
		}
	}
}

func TestParamString(t *testing.T) {
	tests := []struct {
		params string
		want   string
		found  bool
		err    string
	}{
		{"", "", false, ""},
		{"{}", "", false, ""},
		{`{"k": "zone=a"}`, "zone=a", true, ""},
		{`{"s": {"k": "x"}, "k": ""}`, "", true, ""},
		{`{"other": 1}`, "", false, ""},
		{`{"k": "a\"b"}`, "", true, "k is not a string without escapes"},
		{`{"k": 5}`, "", true, "k is not a string without escapes"},
		{`[1]`, "", false, "not a JSON object"},
		{`{"a" 1}`, "", false, "missing ':'"},
	}
	for _, tt := range tests {
		got, found, err := policy.ParamString([]byte(tt.params), "k")
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParamString(%s) error = %v, want %q", tt.params, err, tt.err)
			}
			continue
		}
		if err != nil || string(got) != tt.want || found != tt.found {
			t.Errorf("ParamString(%s) = %q, %v, %v; want %q, %v", tt.params, got, found, err, tt.want, tt.found)
		}
	}
}

// FuzzParams feeds arbitrary switchyard.dev/policy-params values (user
// input that reaches every policy) to the SDK's in-place readers: they
// never panic, a list yields exactly Len elements, and on a valid JSON
// object whose key appears once, what a reader accepts is what
// encoding/json reads there.
func FuzzParams(f *testing.F) {
	for _, s := range []string{
		`{"k": 7, "zones": ["a", "b"], "ports": [80, 443], "on": true, "o": {"x": [1]}}`,
		`{"k": "v"}`, `{"k": 4294967296}`, `{"k": -1}`, `{"k": ["a\n"]}`, `{"k": [1, 2,]}`,
		`[1]`, ``, `{`, `{"k": {"k": 1}, "k": 2}`, `{"k": 1e3}`, `{"k": "\u0041"}`,
	} {
		f.Add([]byte(s), "k")
	}
	f.Fuzz(func(t *testing.T, params []byte, key string) {
		var obj map[string]json.RawMessage
		// The oracle: encoding/json, for objects where key is unambiguous
		// and the text valid UTF-8 (the readers return the bytes as they
		// are; encoding/json replaces invalid ones with U+FFFD).
		oracle := utf8.Valid(params) && json.Unmarshal(params, &obj) == nil && obj != nil &&
			bytes.Count(params, []byte(`"`+key+`"`)) == 1 && key == string(mustJSONString(key))
		raw, inObj := obj[key]

		if v, err := policy.ParamUint(params, key, 9); err == nil && oracle && inObj {
			var want uint32
			if json.Unmarshal(raw, &want) != nil || want != v {
				t.Fatalf("ParamUint(%s, %q) = %d; encoding/json reads %s", params, key, v, raw)
			}
		}
		if v, found, err := policy.ParamString(params, key); err == nil && found && oracle && inObj {
			var want string
			if json.Unmarshal(raw, &want) != nil || want != string(v) {
				t.Fatalf("ParamString(%s, %q) = %q; encoding/json reads %s", params, key, v, raw)
			}
		}
		if v, err := policy.ParamBool(params, key, false); err == nil && oracle && inObj {
			var want bool
			if json.Unmarshal(raw, &want) != nil || want != v {
				t.Fatalf("ParamBool(%s, %q) = %v; encoding/json reads %s", params, key, v, raw)
			}
		}
		if l, found, err := policy.ParamStrings(params, key); err == nil && found {
			var got []string
			for _, s := range l.All() {
				got = append(got, string(s))
			}
			if len(got) != l.Len() {
				t.Fatalf("ParamStrings(%s): All yielded %d, Len %d", params, len(got), l.Len())
			}
			var want []string
			if oracle && inObj && (json.Unmarshal(raw, &want) != nil || !slices.Equal(want, got) && len(want)+len(got) > 0) {
				t.Fatalf("ParamStrings(%s, %q) = %q; encoding/json reads %s", params, key, got, raw)
			}
		}
		if l, found, err := policy.ParamUints(params, key); err == nil && found {
			var got []uint32
			for _, v := range l.All() {
				got = append(got, v)
			}
			if len(got) != l.Len() {
				t.Fatalf("ParamUints(%s): All yielded %d, Len %d", params, len(got), l.Len())
			}
			var want []uint32
			if oracle && inObj && (json.Unmarshal(raw, &want) != nil || !slices.Equal(want, got) && len(want)+len(got) > 0) {
				t.Fatalf("ParamUints(%s, %q) = %v; encoding/json reads %s", params, key, got, raw)
			}
		}
		_, _, _ = policy.ParamObject(params, key)
	})
}

// mustJSONString is key as encoding/json writes it, without the quotes:
// keys that need escaping are left out of the oracle.
func mustJSONString(key string) []byte {
	b, _ := json.Marshal(key)
	return bytes.Trim(b, `"`)
}
