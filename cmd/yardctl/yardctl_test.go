package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/policystage"
	"github.com/switchyard-lb/switchyard/core/reconcile"
)

// yardctl runs yardctl's command line in process. The policy commands
// that evaluate a module get a generous --deadline
// unless the test gives one: a loaded machine must not fail a test on the
// daemon's 50 ms default.
func yardctl(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	if len(args) >= 2 && args[0] == "policy" && evaluates[args[1]] && !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--deadline") }) {
		args = slices.Concat(args[:2], []string{"--deadline", "2m"}, args[2:])
	}
	var out, errb bytes.Buffer
	code = run(t.Context(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// evaluates are the policy subcommands with a --deadline for evaluations.
var evaluates = map[string]bool{"validate": true, "test": true, "pack": true, "apply": true}

var testState = reconcile.State{
	Node:      "node-a",
	Synced:    true,
	LastSync:  time.Date(2026, 11, 29, 20, 30, 0, 0, time.UTC),
	LastError: "",
	Desired: []reconcile.ServiceState{
		{Service: "default/empty", Rejected: "no endpoints"},
		{Service: "default/web", VirtualServices: []reconcile.VirtualServiceState{{
			Protocol: "TCP", Address: netip.MustParseAddrPort("10.96.0.10:80"), Kind: "ClusterIP", Scheduler: "rr",
			Destinations: []reconcile.DestinationState{
				{Address: netip.MustParseAddrPort("10.1.0.1:8080"), Weight: 1},
				{Address: netip.MustParseAddrPort("10.1.0.2:8080"), Weight: 0},
			},
		}, {
			Protocol: "TCP", Address: netip.MustParseAddrPort("192.0.2.1:80"), Kind: "LoadBalancer", Scheduler: "mh",
			Flags: []string{"mh-port"}, Local: true,
			Destinations: []reconcile.DestinationState{{Address: netip.MustParseAddrPort("10.1.0.1:8080"), Weight: 1}},
		}}},
	},
	Applied: []reconcile.ServiceState{
		{Service: "default/empty", Rejected: "no endpoints"},
		{Service: "default/gone"},
	},
	Announced: map[string][]reconcile.AnnouncementState{
		"l2": {{Address: netip.MustParseAddr("192.0.2.1"), Service: "default/web"}},
	},
	Policies: []policystage.Status{
		{Service: "default/api", Policy: "zone", Digest: strings.Repeat("0f", 32), Revision: "4711", Reason: "LoadFailed",
			Message: "policy zone: invalid policy module (running its last good version, sha256 0f0f0f0f0f0f, instead)"},
		{Service: "default/db", Policy: "zone", Digest: strings.Repeat("0f", 32), Revision: "4711", Ready: true, Reason: "Evaluated", Message: "policy zone evaluated"},
		{Service: "default/web", Policy: "builtin:local-first", Ready: true, Reason: "Evaluated", Message: "policy builtin:local-first evaluated"},
	},
}

func stateServer(t *testing.T, code int, body []byte) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/debug/state" || r.Method != http.MethodGet {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(code)
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestState(t *testing.T) {
	body, err := json.MarshalIndent(testState, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	srv := stateServer(t, 200, body)
	addr := strings.TrimPrefix(srv.URL, "http://")

	code, out, errOut := yardctl(t, "state", "--address", addr)
	if code != 0 || errOut != "" {
		t.Fatalf("yardctl state = %d, stderr %q", code, errOut)
	}
	want := `Node:       node-a
Synced:     yes
Last sync:  2026-11-29T20:30:00Z

SERVICE        KIND                PROTO  ADDRESS        SCHEDULER    DESTINATIONS                        APPLIED
default/empty  -                   -      -              -            rejected: no endpoints              yes
default/web    ClusterIP           TCP    10.96.0.10:80  rr           10.1.0.1:8080 w1, 10.1.0.2:8080 w0  no
default/web    LoadBalancer/Local  TCP    192.0.2.1:80   mh(mh-port)  10.1.0.1:8080 w1                    no

Not applied yet: default/web, default/gone (to remove)

Announced by l2: 192.0.2.1 (default/web)

SERVICE      POLICY               SHA256        REVISION  READY  REASON      ERROR
default/api  zone                 0f0f0f0f0f0f  4711      no     LoadFailed  policy zone: invalid policy module (running its last good version, sha256 0f0f0f0f0f0f, instead)
default/db   zone                 0f0f0f0f0f0f  4711      yes    Evaluated   
default/web  builtin:local-first  -             -         yes    Evaluated   
`
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("state output mismatch (-want +got):\n%s", diff)
	}

	// -o json passes the daemon's JSON through unchanged; a URL works as
	// the address.
	code, out, _ = yardctl(t, "state", "-o", "json", "--address", srv.URL+"/")
	if code != 0 || out != string(body) {
		t.Errorf("yardctl state -o json = %d\n%s\nwant the raw body", code, out)
	}
}

func TestStateIPVS(t *testing.T) {
	st := testState
	st.Applied = []reconcile.ServiceState{
		{Service: "default/empty", Rejected: "no endpoints"},
		st.Desired[1],
		{Service: "default/dns", VirtualServices: []reconcile.VirtualServiceState{{
			Protocol: "UDP", Address: netip.MustParseAddrPort("10.96.0.10:53"), Kind: "ClusterIP", Scheduler: "sh",
			AffinitySeconds: 10800,
			Destinations:    []reconcile.DestinationState{{Address: netip.MustParseAddrPort("[fd00::1]:53"), Weight: 1}},
		}}},
	}
	body, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	srv := stateServer(t, 200, body)
	code, out, errOut := yardctl(t, "state", "--ipvs", "--address", srv.URL)
	if code != 0 {
		t.Fatalf("yardctl state --ipvs = %d %s", code, errOut)
	}
	want := "IP Virtual Server version 1.2.1 (size=4096)\n" +
		"Prot LocalAddress:Port Scheduler Flags\n" +
		"  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn\n" +
		"UDP  10.96.0.10:53 sh persistent 10800\n" +
		"  -> [fd00::1]:53                 Masq    1      0          0         \n" +
		"TCP  10.96.0.10:80 rr\n" +
		"  -> 10.1.0.1:8080                Masq    1      0          0         \n" +
		"  -> 10.1.0.2:8080                Masq    0      0          0         \n" +
		"TCP  192.0.2.1:80 mh (mh-port)\n" +
		"  -> 10.1.0.1:8080                Masq    1      0          0         \n"
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("--ipvs output mismatch (-want +got):\n%s", diff)
	}
	if code, _, errOut := yardctl(t, "state", "--ipvs", "-o", "json", "--address", srv.URL); code != 2 ||
		!strings.Contains(errOut, "--ipvs and -o json exclude each other") {
		t.Errorf("--ipvs -o json = %d %q, want a usage error", code, errOut)
	}
}

func TestErrors(t *testing.T) {
	down := httptest.NewServer(http.NotFoundHandler())
	downAddr := strings.TrimPrefix(down.URL, "http://")
	down.Close()
	failing := stateServer(t, 500, []byte("boom\nsecond line\n"))
	garbage := stateServer(t, 200, []byte("{not json"))

	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string // the whole stderr
	}{
		{"no command", nil, 2, "yardctl: no command given (see yardctl --help)\n"},
		{"unknown command", []string{"frobnicate"}, 2, "yardctl: unknown command \"frobnicate\" (see yardctl --help)\n"},
		{"unknown flag", []string{"state", "--bogus"}, 2, "yardctl: flag provided but not defined: -bogus (see yardctl --help)\n"},
		{"bad output", []string{"version", "-o", "yaml"}, 2, "yardctl: unknown output format \"yaml\" (want text or json) (see yardctl --help)\n"},
		{"extra argument", []string{"version", "now"}, 2, "yardctl: unexpected argument \"now\" (see yardctl --help)\n"},
		{
			"daemon down", []string{"state", "--address", downAddr}, 1,
			"yardctl: get http://" + downAddr + "/debug/state: Get \"http://" + downAddr + "/debug/state\": dial tcp " + downAddr +
				": connect: connection refused (is the daemon running, and --address its metrics address?)\n",
		},
		{
			"daemon error", []string{"state", "--address", failing.URL}, 1,
			"yardctl: get " + failing.URL + "/debug/state: 500 Internal Server Error: boom second line\n",
		},
		{
			"garbage", []string{"state", "--address", garbage.URL}, 1,
			"yardctl: decode state from " + garbage.URL + ": invalid character 'n' looking for beginning of object key string\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := yardctl(t, tt.args...)
			if code != tt.wantCode {
				t.Errorf("exit = %d, want %d", code, tt.wantCode)
			}
			// Usage errors may print the usage first; the reason is the
			// last line.
			lines := strings.SplitAfter(strings.TrimSuffix(errOut, "\n"), "\n")
			if diff := cmp.Diff(tt.wantErr, lines[len(lines)-1]+"\n"); diff != "" {
				t.Errorf("stderr mismatch (-want +got):\n%s", diff)
			}
			if tt.wantCode == 1 && (strings.Count(errOut, "\n") != 1 || out != "") {
				t.Errorf("failure printed more than one line: stdout %q stderr %q", out, errOut)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"--help"}, []string{"Usage: yardctl <command>", "pack and apply", "state", "version"}},
		{[]string{"help"}, []string{"Usage: yardctl <command>"}},
		{[]string{"help", "state"}, []string{"Usage: yardctl state", "-address string", "127.0.0.1:10249", "-o string"}},
		{[]string{"state", "--help"}, []string{"Usage: yardctl state", "-address string"}},
		{[]string{"version", "-h"}, []string{"Usage: yardctl version", "-o string"}},
	}
	for _, tt := range tests {
		code, out, errOut := yardctl(t, tt.args...)
		if code != 0 {
			t.Errorf("yardctl %v = %d, want 0", tt.args, code)
		}
		for _, w := range tt.want {
			if !strings.Contains(out+errOut, w) {
				t.Errorf("yardctl %v output lacks %q:\n%s%s", tt.args, w, out, errOut)
			}
		}
	}
}

func TestVersion(t *testing.T) {
	code, out, _ := yardctl(t, "version")
	if code != 0 || !strings.HasPrefix(out, "yardctl dev (go") {
		t.Errorf("yardctl version = %d %q", code, out)
	}
	code, out, _ = yardctl(t, "version", "-o", "json")
	var v map[string]string
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || v["version"] != "dev" || v["go"] == "" || v["platform"] == "" {
		t.Errorf("yardctl version -o json = %d %q (%v)", code, out, err)
	}
}
