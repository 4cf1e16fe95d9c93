package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// freeAddr returns a loopback address with a port that was free a moment
// ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

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
	body := fmt.Sprintf(`apiVersion: switchyard.dev/v1alpha2
kind: SwitchyardConfig
metrics:
  bindAddress: %q
health:
  bindAddress: %q
%s`, tc.metrics, tc.health, extra)
	// Write then rename, as a ConfigMap update replaces the file whole.
	tmp := tc.path + ".tmp"
	if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, tc.path); err != nil {
		t.Fatal(err)
	}
}

// httpGet returns the status and body of a GET, or an error.
func httpGet(url string) (int, string, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
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

// poll calls f until it returns nil or the deadline passes, and returns
// its last error.
func poll(t *testing.T, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for {
		if err = f(); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %s: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
