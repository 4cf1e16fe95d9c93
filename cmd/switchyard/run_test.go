package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    *flags
		wantErr string
	}{
		{name: "defaults", args: nil, want: &flags{configPath: "/etc/switchyard/config.yaml", logFormat: "json"}},
		{
			name: "all",
			args: []string{"--config", "c.yaml", "--kubeconfig=kc", "--hostname-override", "n1", "--v=4", "--log-format=text", "--version", "--set-sysctls", "--profiling", "--cleanup", "--cleanup-kube-proxy"},
			want: &flags{configPath: "c.yaml", kubeconfig: "kc", hostnameOverride: "n1", verbosity: 4, logFormat: "text", version: true, setSysctls: true, profiling: true, cleanup: true, cleanupKubeProxy: true},
		},
		{name: "unknown flag", args: []string{"--bogus"}, wantErr: "flag provided but not defined: -bogus"},
		{name: "bad level", args: []string{"--v=high"}, wantErr: `invalid value "high" for flag -v`},
		{name: "argument", args: []string{"extra"}, wantErr: `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseFlags(tt.args, &bytes.Buffer{})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseFlags error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(flags{})); diff != "" {
				t.Errorf("flags mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNodeName(t *testing.T) {
	host := func(name string, err error) func() (string, error) {
		return func() (string, error) { return name, err }
	}
	tests := []struct {
		name, override, env string
		hostname            func() (string, error)
		want, wantErr       string
	}{
		{name: "override wins", override: "Node-A", env: "node-b", hostname: host("h", nil), want: "node-a"},
		{name: "env", env: " node-b ", hostname: host("h", nil), want: "node-b"},
		{name: "hostname", hostname: host("Host1", nil), want: "host1"},
		{name: "hostname fails", hostname: host("", errors.New("boom")), wantErr: "node name: no --hostname-override or NODE_NAME, and boom"},
		{name: "nothing", hostname: host("", nil), wantErr: "node name: set --hostname-override or NODE_NAME"},
	}
	for _, tt := range tests {
		got, err := nodeName(tt.override, tt.env, tt.hostname)
		if got != tt.want || (err == nil) != (tt.wantErr == "") || (err != nil && err.Error() != tt.wantErr) {
			t.Errorf("%s: nodeName = %q, %v; want %q, %q", tt.name, got, err, tt.want, tt.wantErr)
		}
	}
}

// TestRunRefusesInvalidConfig proves a bad config file stops the daemon
// before it does anything, with the field and line named.
func TestRunRefusesInvalidConfig(t *testing.T) {
	tests := []struct {
		name, config, want string
	}{
		{
			name:   "unknown field",
			config: "apiVersion: switchyard.dev/v1alpha2\nkind: SwitchyardConfig\ndataplane:\n  ipvs:\n    schedular: rr\n",
			want:   `line 5: dataplane.ipvs.schedular: unknown field "schedular"`,
		},
		{
			name:   "bad values",
			config: "apiVersion: switchyard.dev/v1alpha2\nkind: SwitchyardConfig\ndataplane:\n  ipvs:\n    scheduler: foo\n  syncPeriod: 10\n",
			want:   `line 5: dataplane.ipvs.scheduler: unknown scheduler "foo" (want rr, wrr, lc, wlc, lblc, lblcr, dh, sh, sed, nq, fo, ovf, mh, twos); line 6: dataplane.syncPeriod: invalid duration "10"`,
		},
		{
			name:   "unknown field in a v1alpha1 file",
			config: "apiVersion: switchyard.dev/v1alpha1\nkind: SwitchyardConfig\ndataplane:\n  ipvs:\n    schedular: rr\n",
			want:   `line 5: dataplane.ipvs.schedular: unknown field "schedular"`,
		},
		{
			name:   "bad values in a v1alpha1 file",
			config: "apiVersion: switchyard.dev/v1alpha1\nkind: SwitchyardConfig\ndataplane:\n  ipvs:\n    scheduler: foo\n    syncPeriod: 10\n",
			want:   `line 5: dataplane.ipvs.scheduler: unknown scheduler "foo" (want rr, wrr, lc, wlc, lblc, lblcr, dh, sh, sed, nq, fo, ovf, mh, twos); line 6: dataplane.ipvs.syncPeriod: invalid duration "10"`,
		},
		{
			name:   "the dry run's schedulers are IPVS'",
			config: "apiVersion: switchyard.dev/v1alpha2\nkind: SwitchyardConfig\ndataplane:\n  mode: dryrun\n  ipvs:\n    scheduler: maglev\n",
			want:   `line 6: dataplane.ipvs.scheduler: unknown scheduler "maglev" (want rr, wrr, lc, wlc, lblc, lblcr, dh, sh, sed, nq, fo, ovf, mh, twos)`,
		},
		{
			name:   "an announcer type the daemon does not register",
			config: "apiVersion: switchyard.dev/v1alpha2\nkind: SwitchyardConfig\nannouncers:\n- name: x\n  type: carrier-pigeon\n",
			want:   `line 5: announcers[0].type: unknown type "carrier-pigeon" (want arp, bgp or cloud)`,
		},
		{
			name:   "wrong kind",
			config: "apiVersion: v1\nkind: ConfigMap\n",
			want:   `line 1: apiVersion: got "v1", want "switchyard.dev/v1alpha2" or the older "switchyard.dev/v1alpha1"; line 2: kind: got "ConfigMap", want "SwitchyardConfig"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(path, []byte(tt.config), 0o600); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			err := run(t.Context(), []string{"--config", path, "--kubeconfig", "/nonexistent"}, &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), "config "+path+": "+tt.want) {
				t.Errorf("run error = %v\nwant it to contain %q", err, tt.want)
			}
		})
	}
	if err := run(t.Context(), []string{"--config", "/nonexistent/config.yaml"}, &bytes.Buffer{}, &bytes.Buffer{}); err == nil ||
		!strings.Contains(err.Error(), "read config: open /nonexistent/config.yaml: no such file or directory") {
		t.Errorf("run with a missing config = %v", err)
	}
}

func TestRunHelpVersionAndClientErrors(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"--help"}, &stdout, &stderr); err != nil {
		t.Errorf("--help: %v", err)
	}
	for _, want := range []string{"Usage: switchyard", "-config", "-kubeconfig", "-hostname-override", "-v int", "-set-sysctls"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("--help output lacks %q:\n%s", want, stderr.String())
		}
	}
	stdout.Reset()
	if err := run(t.Context(), []string{"--version"}, &stdout, &stderr); err != nil || !strings.HasPrefix(stdout.String(), "switchyard ") {
		t.Errorf("--version = %q, %v", stdout.String(), err)
	}

	tc := writeTestConfig(t, "")
	err := run(t.Context(), []string{"--config", tc.Path, "--kubeconfig", "/nonexistent/kubeconfig", "--hostname-override", "n"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "load kubeconfig /nonexistent/kubeconfig") {
		t.Errorf("run with a missing kubeconfig = %v", err)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	err = run(t.Context(), []string{"--config", tc.Path, "--hostname-override", "n"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "in-cluster config (use --kubeconfig outside a cluster)") {
		t.Errorf("run outside a cluster without --kubeconfig = %v", err)
	}
	err = run(t.Context(), []string{"--config", tc.Path, "--log-format", "xml"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), `unknown log format "xml"`) {
		t.Errorf("run --log-format xml = %v", err)
	}

	// --set-sysctls needs no API server and exits; with the dry-run
	// dataplane it has nothing to set.
	stderr.Reset()
	if err := run(t.Context(), []string{"--config", tc.Path, "--set-sysctls", "--log-format=text"}, &stdout, &stderr); err != nil {
		t.Errorf("run --set-sysctls (dryrun) = %v", err)
	}
	if !strings.Contains(stderr.String(), "no sysctls to set") {
		t.Errorf("run --set-sysctls (dryrun) logged:\n%s", stderr.String())
	}
}
