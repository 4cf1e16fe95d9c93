package policy_test

import (
	"strings"
	"testing"

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
