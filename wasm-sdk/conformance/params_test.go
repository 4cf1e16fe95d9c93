package conformance_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/plugins/wasm"
	"github.com/switchyard-lb/switchyard/wasm-sdk/go/policy"
)

// paramReference is what the paramprobe modules (wasm-sdk/go/policy/
// testdata/paramprobe, wasm-sdk/rust/testdata/paramprobe.rs,
// wasm-sdk/assemblyscript/testdata/paramprobe.ts) decide for params,
// computed with the Go SDK natively: the weights of the first 12
// endpoints are
//
//	0  uint u (default 7)            6  total length of the strings of ss
//	1  bool b (default false)        7  whether ss holds "zone-b"
//	2  bool t (default true)         8  uints us: 1 + its length, 0 when absent
//	3  string s: 1 + its length      9  sum of us
//	4  s's first byte                10 whether us holds 443
//	5  strings ss: 1 + its length    11 object o: 1 + its uint u (default 5) & 0x7fff
//
// each & 0xffff, or the first error, reading in that order.
func paramReference(params string) ([]uint32, error) {
	p := []byte(params)
	w := make([]uint32, 12)
	var err error
	bit := func(b bool) uint32 { return map[bool]uint32{true: 1}[b] }
	if w[0], err = policy.ParamUint(p, "u", 7); err != nil {
		return nil, err
	}
	b, err := policy.ParamBool(p, "b", false)
	if err != nil {
		return nil, err
	}
	t, err := policy.ParamBool(p, "t", true)
	if err != nil {
		return nil, err
	}
	w[1], w[2] = bit(b), bit(t)
	if s, found, err := policy.ParamString(p, "s"); err != nil {
		return nil, err
	} else if found {
		w[3] = 1 + uint32(len(s))
		if len(s) > 0 {
			w[4] = uint32(s[0])
		}
	}
	if ss, found, err := policy.ParamStrings(p, "ss"); err != nil {
		return nil, err
	} else if found {
		w[5] = 1 + uint32(ss.Len())
		for _, v := range ss.All() {
			w[6] += uint32(len(v))
		}
		w[7] = bit(ss.Contains([]byte("zone-b")))
	}
	if us, found, err := policy.ParamUints(p, "us"); err != nil {
		return nil, err
	} else if found {
		w[8] = 1 + uint32(us.Len())
		for _, v := range us.All() {
			w[9] += v
		}
		w[10] = bit(us.Contains(443))
	}
	if o, found, err := policy.ParamObject(p, "o"); err != nil {
		return nil, err
	} else if found {
		u, err := policy.ParamUint(o, "u", 5)
		if err != nil {
			return nil, err
		}
		w[11] = 1 + u&0x7fff
	}
	for i := range w {
		w[i] &= 0xffff
	}
	return w, nil
}

// TestSDKParamHelpers checks that every SDK's parameter helpers read
// what the Go SDK's read and decline with the same messages.
func TestSDKParamHelpers(t *testing.T) {
	r, dir := runtime(t)
	cases := []struct{ name, params, wantErr string }{
		{"empty", "", ""},
		{"every kind", `{"u": 9, "b": true, "t": false, "s": "zone=a", "ss": ["zone-a", "zone-b"], "us": [80, 443, 4294967295], "o": {"u": 12, "x": [1]}}`, ""},
		{"spacing and empty lists", "{ \"ss\" : [ ] ,\n\"us\":[ ], \"o\": {} }", ""},
		{"first occurrence counts", `{"u": 1, "u": "x", "ss": ["a"], "ss": 3}`, ""},
		{"nested wide", `{"o": {"u": 70000, "o": {"u": 1}}}`, ""},
		{"unknown keys skipped", `{"z": {"a": [1, {"b": null}], "c": "d\"e"}, "s": ""}`, ""},
		{"not an object", `[1]`, "params: not a JSON object"},
		{"bool", `{"b": "yes"}`, "params: b is not true or false"},
		{"bool prefix", `{"t": truer}`, "params: t is not true or false"},
		{"string escapes", `{"s": "a\"b"}`, "params: s is not a string without escapes"},
		{"strings element", `{"ss": ["a", 1]}`, "params: ss is not a list of strings without escapes"},
		{"strings escapes", `{"ss": ["a\\b"]}`, "params: ss is not a list of strings without escapes"},
		{"strings not a list", `{"ss": "a"}`, "params: ss is not a list of strings without escapes"},
		{"uints fraction", `{"us": [1.5]}`, "params: us is not a list of integers from 0 to 4294967295"},
		{"uints too large", `{"us": [4294967296]}`, "params: us is not a list of integers from 0 to 4294967295"},
		{"uints trailing comma", `{"u": 1, "b": true, "t": true, "s": "", "ss": [], "us": [1,]}`, "params: us is not a list of integers from 0 to 4294967295"},
		{"malformed under a key read later", `{"us": [1,]}`, "params: bad value"},
		{"object", `{"o": 3}`, "params: o is not an object"},
		{"nested uint", `{"o": {"u": -1}}`, "params: u is not an integer from 0 to 4294967295"},
		{"first error wins", `{"u": "x", "b": 1}`, "params: u is not an integer from 0 to 4294967295"},
	}
	for _, lang := range languages {
		p := load(t, r, dir, lang, "paramprobe")
		if p == nil {
			continue
		}
		for _, tc := range cases {
			want, werr := paramReference(tc.params)
			if tc.wantErr != "" {
				if werr == nil || werr.Error() != tc.wantErr {
					t.Fatalf("%s: the Go SDK says %v, want %q", tc.name, werr, tc.wantErr)
				}
			} else if werr != nil {
				t.Fatalf("%s: the Go SDK fails: %v", tc.name, werr)
			}
			got, err := p.Evaluate(context.Background(), scenario(tc.params, many(12)...))
			if tc.wantErr != "" {
				if !errors.Is(err, wasm.ErrDeclined) || !strings.HasSuffix(err.Error(), "policy declined: "+tc.wantErr) {
					t.Errorf("%s, %s: %v, want a decline with %q", lang, tc.name, err, tc.wantErr)
				}
				continue
			}
			if err != nil {
				t.Errorf("%s, %s: %v", lang, tc.name, err)
				continue
			}
			if diff := cmp.Diff(want, got.Weights); diff != "" {
				t.Errorf("%s, %s: weights (-Go SDK +%s):\n%s", lang, tc.name, lang, diff)
			}
		}
	}
}
