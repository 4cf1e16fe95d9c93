package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const webPlan = "default/web ClusterIP TCP 10.96.0.10:80 rr -> 10.1.0.1:8080 10.1.0.2:8080"

// TestDaemonPolicyCacheDir: the daemon's WebAssembly runtime keeps its
// compiled code in policies.cacheDir, creating it (plugins/wasm's tests
// show a second runtime loading from it), and the policies' last good
// versions in its last-good directory (plugins/registry's tests show a
// registry running them).
func TestDaemonPolicyCacheDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache", "wasm")
	d := startDaemon(t, fmt.Sprintf("policies:\n  cacheDir: %s\n", dir))
	d.waitPlan(t, []string{webPlan})
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 2 || entries[0].Name() != "last-good" || !strings.HasPrefix(entries[1].Name(), "wazero-") {
		t.Errorf("policies.cacheDir holds %v (%v), want last-good and wazero's directory", entries, err)
	}
	if strings.Contains(d.Logs.String(), "policies.cacheDir unusable") {
		t.Errorf("warned about a usable cache directory; logs:\n%s", d.Logs.String())
	}
}

// TestDaemonRunsWithoutUnusableCacheDir: a cache directory that cannot be
// created does not stop the daemon; it says so once and runs without.
func TestDaemonRunsWithoutUnusableCacheDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, fmt.Sprintf("policies:\n  cacheDir: %s\n", filepath.Join(file, "wasm")))
	d.waitPlan(t, []string{webPlan})
	if n := strings.Count(d.Logs.String(), "policies.cacheDir unusable"); n != 1 {
		t.Errorf("%d warnings about the cache directory, want 1; logs:\n%s", n, d.Logs.String())
	}
}
