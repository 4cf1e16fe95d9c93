package walkthrough_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchyard-lb/switchyard/plugins/wasm/wasmtest"
	"github.com/switchyard-lb/switchyard/wasm-sdk/walkthrough"
)

// TestGoSDKOutsideModule follows the Go walkthrough's module setup in an
// empty directory, both ways the page gives, and builds the page's policy
// for wasip1 there: the SDK's module resolves alone (from a proxy, or from
// the checkout through a workspace), with no replace line and nothing of
// the daemon's module, which would not resolve outside the checkout.
func TestGoSDKOutsideModule(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the Go compiler")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	goTool := wasmtest.GoTool()
	run := func(t *testing.T, dir string, env []string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), goTool, args...)
		cmd.Dir = dir
		// No proxy: what the module needs must already be there.
		cmd.Env = append(append(os.Environ(), "GOPROXY=off", "GOFLAGS="), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string)
	}{
		{"go get from a proxy", func(t *testing.T, dir string) {
			if _, err := walkthrough.Setup(t.Context(), root, dir, walkthrough.Go); err != nil {
				t.Fatal(err)
			}
		}},
		{"workspace on the checkout", func(t *testing.T, dir string) {
			run(t, dir, nil, "mod", "init", "example.com/mypolicy")
			run(t, dir, nil, "work", "init", ".", filepath.Join(root, "wasm-sdk", "go"))
			files, err := walkthrough.Load(root, walkthrough.Go)
			if err != nil {
				t.Fatal(err)
			}
			if err := walkthrough.Write(dir, files); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.setup(t, dir)
			out := filepath.Join(dir, "policy.wasm")
			run(t, dir, []string{"GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0"}, "build", "-buildmode=c-shared", "-o", out, ".")
			if b, err := os.ReadFile(out); err != nil || len(b) < 4 || string(b[:4]) != "\x00asm" {
				t.Errorf("go build wrote no WebAssembly module (%v)", err)
			}
			mods := run(t, dir, nil, "list", "-m", "all")
			if want := "example.com/mypolicy\n" + walkthrough.SDKModule; !strings.HasPrefix(mods, want) || strings.Count(mods, "\n") != 2 {
				t.Errorf("go list -m all:\n%s\nwant the policy's module and the SDK's, nothing else", mods)
			}
			gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(gomod), "replace") {
				t.Errorf("go.mod has a replace line:\n%s", gomod)
			}
		})
	}
}
