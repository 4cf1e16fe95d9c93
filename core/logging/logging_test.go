package logging

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2"
)

func TestNewLevels(t *testing.T) {
	tests := []struct {
		verbosity int
		want      []string // messages that pass, of info, V(2) and debug
	}{
		{0, []string{"info@INFO"}},
		{2, []string{"info@INFO", "v2@V2"}},
		{4, []string{"info@INFO", "v2@V2", "debug@V4"}},
		{-1, []string{"info@INFO"}},
	}
	for _, tt := range tests {
		var buf bytes.Buffer
		log, err := New(&buf, FormatJSON, tt.verbosity)
		if err != nil {
			t.Fatal(err)
		}
		log.Info("info")
		log.Log(t.Context(), slog.Level(-2), "v2")
		log.Debug("debug")
		var got []string
		for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			var rec struct{ Msg, Level string }
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("line %q is not JSON: %v", line, err)
			}
			got = append(got, rec.Msg+"@"+rec.Level)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("--v=%d: messages mismatch (-want +got):\n%s", tt.verbosity, diff)
		}
	}
}

func TestNewFormats(t *testing.T) {
	var buf bytes.Buffer
	log, err := New(&buf, FormatText, 0)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hello", "k", "v")
	if got := buf.String(); !strings.Contains(got, "level=INFO msg=hello k=v") {
		t.Errorf("text output = %q", got)
	}
	if _, err := New(&buf, "xml", 0); err == nil || !strings.Contains(err.Error(), `unknown log format "xml"`) {
		t.Errorf("New(xml) error = %v", err)
	}
}

func TestRouteKlog(t *testing.T) {
	var buf bytes.Buffer
	log, err := New(&buf, FormatJSON, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := RouteKlog(log, 2); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { klog.ClearLogger() })
	klog.InfoS("from klog", "key", "value")
	klog.V(2).InfoS("klog v2")
	klog.V(3).InfoS("klog v3")
	klog.Flush()
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("line %q is not JSON: %v", line, err)
		}
		got = append(got, rec["msg"].(string))
	}
	if diff := cmp.Diff([]string{"from klog", "klog v2"}, got); diff != "" {
		t.Errorf("klog lines mismatch (-want +got):\n%s", diff)
	}
}
