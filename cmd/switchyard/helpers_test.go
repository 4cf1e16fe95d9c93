package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-lb/switchyard/core/config"
	"github.com/switchyard-lb/switchyard/test/harness"
)

// The parts of the daemon harness every daemon-level suite shares, under
// this package's names.
type syncBuffer = harness.Buffer

var (
	freeAddr = harness.FreeAddr
	httpGet  = harness.Get
	poll     = harness.Poll
)

// testConfig is a config with the servers on free loopback ports.
type testConfig struct {
	path, metrics, health string
}

func writeTestConfig(t *testing.T, extra string) *testConfig {
	t.Helper()
	tc := &testConfig{path: filepath.Join(t.TempDir(), "config.yaml"), metrics: freeAddr(t), health: freeAddr(t)}
	tc.write(t, extra)
	return tc
}

// write writes the config with extra appended. The default dataplane is
// IPVS, which this host's kernel may lack, so the file always names a
// mode: dryrun unless extra has a dataplane section, which must then name
// its mode itself.
func (tc *testConfig) write(t *testing.T, extra string) {
	t.Helper()
	if !strings.Contains("\n"+extra, "\ndataplane:") {
		extra += "dataplane:\n  mode: dryrun\n"
	} else if !strings.Contains(extra, "\n  mode: ") {
		t.Fatalf("test config's dataplane section names no mode (the default, ipvs, needs the kernel's IPVS):\n%s", extra)
	}
	// The default policies.cacheDir is a host path (/var/cache/...):
	// tests that do not name one run without the cache.
	if !strings.Contains(extra, "cacheDir:") {
		if strings.Contains("\n"+extra, "\npolicies:\n") {
			extra = strings.TrimPrefix(strings.Replace("\n"+extra, "\npolicies:\n", "\npolicies:\n  cacheDir: \"\"\n", 1), "\n")
		} else {
			extra += "policies:\n  cacheDir: \"\"\n"
		}
	}
	// extra may start with an apiVersion line of its own.
	apiVersion := "apiVersion: " + config.APIVersion
	if first, rest, ok := strings.Cut(extra, "\n"); ok && strings.HasPrefix(first, "apiVersion: ") {
		apiVersion, extra = first, rest
	}
	body := fmt.Sprintf(`%s
kind: SwitchyardConfig
metrics:
  bindAddress: %q
health:
  bindAddress: %q
%s`, apiVersion, tc.metrics, tc.health, extra)
	// Write then rename, as a ConfigMap update replaces the file whole.
	tmp := tc.path + ".tmp"
	if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, tc.path); err != nil {
		t.Fatal(err)
	}
}

// debugState is the part of /debug/state the tests read.
type debugState struct {
	Node      string `json:"node"`
	Synced    bool   `json:"synced"`
	LastError string `json:"lastError"`
	Desired   []struct {
		Service         string `json:"service"`
		Rejected        string `json:"rejected"`
		VirtualServices []struct {
			Protocol     string `json:"protocol"`
			Address      string `json:"address"`
			Kind         string `json:"kind"`
			Scheduler    string `json:"scheduler"`
			Destinations []struct {
				Address string `json:"address"`
			} `json:"destinations"`
		} `json:"virtualServices"`
	} `json:"desired"`
}

func getState(metricsAddr string) (*debugState, error) {
	code, body, err := httpGet("http://" + metricsAddr + "/debug/state")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("/debug/state: %d %s", code, body)
	}
	var st debugState
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		return nil, fmt.Errorf("/debug/state: %w", err)
	}
	return &st, nil
}

// vsSummary flattens a state's virtual services into comparable strings
// "service proto address scheduler -> destinations".
func vsSummary(st *debugState) []string {
	var out []string
	for _, s := range st.Desired {
		for _, vs := range s.VirtualServices {
			line := fmt.Sprintf("%s %s %s %s %s ->", s.Service, vs.Kind, vs.Protocol, vs.Address, vs.Scheduler)
			for _, d := range vs.Destinations {
				line += " " + d.Address
			}
			out = append(out, line)
		}
	}
	return out
}

// daemonProc is one daemon a test runs in a goroutine (run, as main runs
// it, or runDaemon): how to stop it and what it logged. Only the test
// goroutine stops it (Cleanup functions run on it too).
type daemonProc struct {
	name   string
	logs   *syncBuffer
	ctx    context.Context
	cancel context.CancelFunc
	done   chan error
	// stopped is set once stop or halt has collected the result.
	stopped bool
}

// goDaemon runs daemon in a goroutine on a context of its own, derived
// from parent, with logs as its log sink.
func goDaemon(parent context.Context, name string, logs *syncBuffer, daemon func(ctx context.Context) error) *daemonProc {
	p := &daemonProc{name: name, logs: logs, done: make(chan error, 1)}
	p.ctx, p.cancel = context.WithCancel(parent)
	go func() { p.done <- daemon(p.ctx) }()
	return p
}

// stop cancels the daemon and waits for it to return nil: an error fails
// the test, and so does not returning within 30 s.
func (p *daemonProc) stop(t *testing.T) {
	t.Helper()
	if p.stopped {
		return
	}
	p.stopped = true
	p.cancel()
	select {
	case err := <-p.done:
		if err != nil {
			t.Errorf("%s: daemon after cancel = %v, want nil", p.name, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: daemon did not return within 30s of cancel", p.name)
	}
}

// halt cancels the daemon and waits for it to return, whatever it
// returns: for the tests that do not check how it ends.
func (p *daemonProc) halt() {
	if p.stopped {
		return
	}
	p.stopped = true
	p.cancel()
	<-p.done
}

// logIfFailed logs what the daemon wrote when the test has failed.
func (p *daemonProc) logIfFailed(t *testing.T) {
	t.Helper()
	if t.Failed() {
		t.Logf("%s logs:\n%s", p.name, p.logs.String())
	}
}
