package lab

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// VMTestEnv opts in to the tests that boot VMs on the host; test/lab/lab.mk
// sets it. Without it they skip, so `go test ./...` stays fast. With it, a
// missing qemu or kernel is a failure, not a skip.
const VMTestEnv = "SWITCHYARD_LAB_VM"

func requireVM(t *testing.T, cfg Config) Assets {
	t.Helper()
	if os.Getenv(VMTestEnv) != "1" {
		t.Skipf("boots VMs: set %s=1 (make test-lab does)", VMTestEnv)
	}
	a, err := EnsureAssets(t.Context(), cfg)
	if err != nil {
		t.Fatalf("lab assets: %v", err)
	}
	return a
}

// goBuild runs `go build` (or any go subcommand) with CGO off, so the
// result runs in the guest, and returns the output binary's path.
func goBuild(t *testing.T, pkg string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

func TestRunVerdicts(t *testing.T) {
	a := requireVM(t, Config{})
	prog := goBuild(t, "./testdata/guestprog")

	tests := []struct {
		name     string
		args     []string
		env      []string
		timeout  time.Duration
		wantCode int
		wantOut  string
		wantErr  error
	}{
		{
			name: "arguments and environment arrive", args: []string{"echo", "a b", "", "c"}, env: []string{"FOO=bar baz"},
			wantOut: "args=[\"a b\" \"\" \"c\"]\nSWITCHYARD_LAB=1 FOO=bar baz\n",
		},
		{
			// The job prints a verdict of 0 with a made-up nonce, then exits 3.
			name: "exit code comes back, a forged verdict is only output", args: []string{"forge"},
			wantCode: 3, wantOut: "SWITCHYARD_LAB_EXIT 00000000000000000000000000000000 0\n",
		},
		{
			name: "poweroff before the verdict fails", args: []string{"poweroff"},
			wantErr: ErrNoVerdict, wantOut: "powering off\n",
		},
		{
			name: "kernel panic fails", args: []string{"panic"},
			wantErr: ErrNoVerdict, wantOut: "crashing the kernel\n",
		},
		{
			name: "timeout fails", args: []string{"hang"}, timeout: 12 * time.Second,
			wantErr: ErrTimeout,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out strings.Builder
			res, err := Run(t.Context(), a, Job{Binary: prog, Args: tc.args, Env: tc.env, Timeout: tc.timeout, Output: &out})
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Run error = %v, want %v", err, tc.wantErr)
				}
				if tc.name == "timeout fails" {
					return // the output depends on how far the boot got
				}
			} else if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if res.ExitCode != tc.wantCode {
				t.Errorf("exit code = %d, want %d", res.ExitCode, tc.wantCode)
			}
			if diff := cmp.Diff(tc.wantOut, out.String()); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
		})
	}
}

// TestModprobeResolvesDependencies boots an initramfs whose preload list
// names only leaf modules: their dependencies must come from the generated
// modules.dep, in an order the kernel accepts.
func TestModprobeResolvesDependencies(t *testing.T) {
	t.Parallel()
	a := requireVM(t, Config{Modules: []string{"crc32c_generic", "ip_vs_rr", "nft_masq"}})
	prog := goBuild(t, "./testdata/guestprog")
	var out strings.Builder
	res, err := Run(t.Context(), a, Job{Binary: prog, Args: []string{"modules"}, Output: &out})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("exit code %d:\n%s", res.ExitCode, out.String())
	}
	loaded := strings.Fields(out.String())
	for _, m := range []string{"ip_vs_rr", "ip_vs", "nf_conntrack", "nf_defrag_ipv4", "nf_defrag_ipv6", "libcrc32c", "nft_masq", "nf_nat", "nf_tables"} {
		if !slices.Contains(loaded, m) {
			t.Errorf("module %s not loaded; loaded: %v", m, loaded)
		}
	}
}

// TestUserNetReachesHostLoopback boots a guest with Job.UserNet: it
// dials 10.0.2.2, which qemu's user networking maps to the host's
// loopback, and must read what a listener on 127.0.0.1 says. Without the
// NIC the same job must fail, so the pass is the NIC's doing.
func TestUserNetReachesHostLoopback(t *testing.T) {
	t.Parallel()
	a := requireVM(t, Config{Modules: append(slices.Clone(DefaultModules), UserNetModules...)})
	prog := goBuild(t, "./testdata/guestprog")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, "hello from the host\n")
			c.Close()
		}
	}()
	target := "10.0.2.2:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	tests := []struct {
		name     string
		userNet  bool
		wantCode int
		wantOut  string
	}{
		{name: "with the NIC", userNet: true, wantOut: "got hello from the host\n"},
		{name: "without", userNet: false, wantCode: 1},
	}
	for _, tc := range tests {
		var out strings.Builder
		res, err := Run(t.Context(), a, Job{Binary: prog, Args: []string{"dial", target}, UserNet: tc.userNet, Timeout: 2 * time.Minute, Output: &out})
		if err != nil {
			t.Fatalf("%s: Run: %v", tc.name, err)
		}
		if res.ExitCode != tc.wantCode {
			t.Errorf("%s: exit code = %d, want %d; output:\n%s", tc.name, res.ExitCode, tc.wantCode, out.String())
		}
		if tc.wantOut != "" {
			if diff := cmp.Diff(tc.wantOut, out.String()); diff != "" {
				t.Errorf("%s: output (-want +got):\n%s", tc.name, diff)
			}
		}
	}
}

// TestGoTestExecPropagatesFailure runs a package with a deliberately
// failing guest-only test through `go test -exec labrun`: go test must
// report the failure and exit non-zero. Running only its passing test must
// succeed, so the failure is the guest's and not the harness's.
func TestGoTestExecPropagatesFailure(t *testing.T) {
	t.Parallel()
	requireVM(t, Config{})
	labrun := goBuild(t, "./cmd/labrun")

	tests := []struct {
		name     string
		run      string
		wantFail bool
		wantOut  []string
	}{
		{
			name: "failing guest test fails go test", run: ".", wantFail: true,
			wantOut: []string{"--- FAIL: TestFailsInGuest", "deliberate failure inside the lab guest", "FAIL\tgithub.com/switchyard-lb/switchyard/test/lab/testdata/failguest"},
		},
		{
			name: "passing guest tests pass go test", run: "^(TestPasses|TestReadsTestData)$",
			wantOut: []string{"--- PASS: TestPasses", "--- PASS: TestReadsTestData", "ok  \tgithub.com/switchyard-lb/switchyard/test/lab/testdata/failguest"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command("go", "test", "-count=1", "-v", "-run", tc.run, "-exec", labrun+" run", "./testdata/failguest")
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			b, err := cmd.CombinedOutput()
			out := string(b)
			var exitErr *exec.ExitError
			switch {
			case tc.wantFail && !errors.As(err, &exitErr):
				t.Errorf("go test succeeded (err %v), want a failure:\n%s", err, out)
			case !tc.wantFail && err != nil:
				t.Errorf("go test: %v\n%s", err, out)
			}
			for _, w := range tc.wantOut {
				if !strings.Contains(out, w) {
					t.Errorf("go test output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// TestXZModulesMatchPlain compresses real modules the way Debian 13 ships
// them (.ko.xz) and checks that the builder reads the same metadata and
// stores the same uncompressed image under the plain .ko path.
func TestXZModulesMatchPlain(t *testing.T) {
	a := requireVM(t, Config{})
	plain, err := openModuleTree(a.Kernel.ModulesDir())
	if err != nil {
		t.Fatal(err)
	}
	xzDir := t.TempDir()
	names := []string{"ip_vs", "nf_conntrack", "dummy"}
	for _, name := range names {
		rel := plain.paths[name]
		dst := filepath.Join(xzDir, rel+".xz")
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("sh", "-c", `xz -c --check=crc32 "$1" >"$2"`, "sh", filepath.Join(a.Kernel.ModulesDir(), rel), dst)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("xz %s: %v\n%s", name, err, b)
		}
	}
	compressed, err := openModuleTree(xzDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		want, err := plain.info(name)
		if err != nil {
			t.Fatal(err)
		}
		got, err := compressed.info(name)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: module info from .ko.xz (-plain +xz):\n%s", name, diff)
		}
		wantData, _, err := plain.read(name)
		if err != nil {
			t.Fatal(err)
		}
		gotData, _, err := compressed.read(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(wantData, gotData) {
			t.Errorf("%s: decompressed image differs from the plain module", name)
		}
	}
}

// TestExtraRunsDynamicHostProgram runs a dynamically linked host program
// in the guest, which has no libc: Job.Extra must bring it with its loader
// and libraries. Without the extra the same job must fail.
func TestExtraRunsDynamicHostProgram(t *testing.T) {
	t.Parallel()
	// coreutils' numfmt: on every Debian host, linked against libc, and
	// not a busybox applet the guest would find instead.
	const numfmt = "/usr/bin/numfmt"
	if d, err := elfDepsOf(os.DirFS("/"), numfmt[1:]); err != nil || d.Interp == "" {
		t.Skipf("%s is not a dynamically linked program here (%v)", numfmt, err)
	}
	a := requireVM(t, Config{})
	prog := goBuild(t, "./testdata/guestprog")
	for _, tc := range []struct {
		name  string
		extra []string
		want  int
	}{
		{name: "with extra", extra: []string{numfmt}, want: 0},
		{name: "without", want: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			res, err := Run(t.Context(), a, Job{Binary: prog, Args: []string{"run", numfmt, "--to=iec", "1048576"}, Output: &out, Extra: tc.extra})
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if res.ExitCode != tc.want {
				t.Fatalf("exit code %d, want %d:\n%s", res.ExitCode, tc.want, out.String())
			}
			if tc.want == 0 && strings.TrimSpace(out.String()) != "1.0M" {
				t.Errorf("numfmt --to=iec 1048576 printed %q, want 1.0M", out.String())
			}
		})
	}
}
