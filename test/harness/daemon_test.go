package harness

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/config"
)

func TestConfigWrite(t *testing.T) {
	head := func(c *Config, apiVersion string) string {
		return fmt.Sprintf("apiVersion: %s\nkind: SwitchyardConfig\nmetrics:\n  bindAddress: %q\nhealth:\n  bindAddress: %q\n",
			apiVersion, c.Metrics, c.Health)
	}
	for _, tt := range []struct {
		name, extra string
		want        string // after the head
		apiVersion  string // default config.APIVersion
	}{
		{"empty: dryrun, no cache", "", "dataplane:\n  mode: dryrun\npolicies:\n  cacheDir: \"\"\n", ""},
		{"own dataplane", "dataplane:\n  mode: ipvs\n", "dataplane:\n  mode: ipvs\npolicies:\n  cacheDir: \"\"\n", ""},
		{"own policies", "policies:\n  default: builtin:uniform\n",
			"policies:\n  cacheDir: \"\"\n  default: builtin:uniform\ndataplane:\n  mode: dryrun\n", ""},
		{"own cache", "policies:\n  cacheDir: /tmp/x\n", "policies:\n  cacheDir: /tmp/x\ndataplane:\n  mode: dryrun\n", ""},
		{"own apiVersion", "apiVersion: switchyard.dev/v1alpha1\npools: []\n",
			"pools: []\ndataplane:\n  mode: dryrun\npolicies:\n  cacheDir: \"\"\n", "switchyard.dev/v1alpha1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := WriteConfig(t, tt.extra)
			got, err := os.ReadFile(c.Path)
			if err != nil {
				t.Fatal(err)
			}
			apiVersion := tt.apiVersion
			if apiVersion == "" {
				apiVersion = APIVersion
			}
			if diff := cmp.Diff(head(c, apiVersion)+tt.want, string(got)); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAPIVersion(t *testing.T) {
	if APIVersion != config.APIVersion {
		t.Errorf("APIVersion = %q, want core/config's %q", APIVersion, config.APIVersion)
	}
}

func TestConfigWriteWantsADataplaneMode(t *testing.T) {
	msg := fatalOf(t, func(tb testing.TB) { WriteConfig(tb, "dataplane:\n  ipvs:\n    scheduler: rr\n") })
	if !strings.Contains(msg, "names no mode") {
		t.Errorf("Fatalf message = %q, want it to say the mode is missing", msg)
	}
}

func TestGoStopAndHalt(t *testing.T) {
	clean := Go(t.Context(), "clean", &Buffer{}, func(ctx context.Context) error { <-ctx.Done(); return nil })
	clean.Stop(t)
	clean.Stop(t) // a second stop does nothing

	boom := errors.New("boom")
	failing := Go(t.Context(), "failing", &Buffer{}, func(ctx context.Context) error { <-ctx.Done(); return boom })
	failing.Halt() // whatever it returns
	if failing.Context().Err() == nil {
		t.Error("the daemon's context is not done after Halt")
	}
}

func TestExecStopsWithSIGTERM(t *testing.T) {
	sh := "/bin/sh"
	if _, err := os.Stat(sh); err != nil {
		t.Skipf("no %s: %v", sh, err)
	}
	d := Exec(t, "shell", sh, []string{"GREETING=hello"}, "-c", `trap 'echo bye; exit 0' TERM; echo "$GREETING"; while :; do sleep 0.05; done`)
	Poll(t, 4*time.Minute, Cond("the greeting", func() bool { return strings.Contains(d.Logs.String(), "hello") }))
	d.Stop(t)
	if got := d.Logs.String(); got != "hello\nbye\n" {
		t.Errorf("logs = %q, want hello and bye", got)
	}
}

// ExecIn runs the command behind a wrapper that execs it (env here, ip
// netns exec in the lab suites): the signals reach the command itself.
func TestExecInAndKill(t *testing.T) {
	sh, env := "/bin/sh", "/usr/bin/env"
	for _, f := range []string{sh, env} {
		if _, err := os.Stat(f); err != nil {
			t.Skipf("no %s: %v", f, err)
		}
	}
	script := `trap 'echo bye; exit 0' TERM; echo "$GREETING"; while :; do sleep 0.05; done`
	d := ExecIn(t, []string{env}, "shell", sh, []string{"GREETING=hello"}, "-c", script)
	Poll(t, 4*time.Minute, Cond("the greeting", func() bool { return strings.Contains(d.Logs.String(), "hello") }))
	d.Stop(t)
	if got := d.Logs.String(); got != "hello\nbye\n" {
		t.Errorf("logs after Stop = %q, want hello and bye", got)
	}

	d = ExecIn(t, []string{env}, "shell", sh, []string{"GREETING=hello"}, "-c", script)
	Poll(t, 4*time.Minute, Cond("the greeting", func() bool { return strings.Contains(d.Logs.String(), "hello") }))
	d.Kill(t)
	if got := d.Logs.String(); got != "hello\n" {
		t.Errorf("logs after Kill = %q, want hello only (SIGKILL runs no trap)", got)
	}
}

func TestParseMetric(t *testing.T) {
	body := "# HELP x\nswitchyard_a{k=\"v\"} 2\nswitchyard_b 3.5\nswitchyard_bad x\n"
	tests := []struct {
		prefix  string
		want    float64
		wantErr bool
	}{
		{prefix: `switchyard_a{k="v"} `, want: 2},
		{prefix: "switchyard_b ", want: 3.5},
		{prefix: "switchyard_c ", wantErr: true},
		{prefix: "switchyard_bad ", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseMetric(body, tt.prefix)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseMetric(%q) = %v, %v; want %v, error %v", tt.prefix, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestMetricDebugStateAndWaitReady(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics":
			fmt.Fprint(w, "# HELP x\nswitchyard_a{k=\"v\"} 2\nswitchyard_b 3.5\n")
		case "/debug/state":
			fmt.Fprint(w, `{"node": "node-a"}`)
		case "/readyz":
			fmt.Fprint(w, "ok")
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	if v, ok := Metric(addr, `switchyard_a{k="v"} `); !ok || v != 2 {
		t.Errorf("Metric(switchyard_a) = %v, %v; want 2", v, ok)
	}
	if v, ok := Metric(addr, "switchyard_b "); !ok || v != 3.5 {
		t.Errorf("Metric(switchyard_b) = %v, %v; want 3.5", v, ok)
	}
	if _, ok := Metric(addr, "switchyard_c "); ok {
		t.Error("Metric(switchyard_c) found a sample that is not there")
	}
	var st struct{ Node string }
	if err := DebugState(addr, &st); err != nil || st.Node != "node-a" {
		t.Errorf("DebugState = %+v, %v; want node-a", st, err)
	}
	WaitReady(t, addr, 4*time.Minute)
}
