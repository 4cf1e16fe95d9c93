package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// APIVersion is the config version WriteConfig writes unless told
// otherwise: core/config's (TestAPIVersion), spelled out so that this
// package imports nothing of the daemon's and any package's tests may use
// it.
const APIVersion = "switchyard.dev/v1alpha2"

// Config is a daemon config file whose metrics and health servers listen
// on free loopback ports.
type Config struct {
	Path, Metrics, Health string
}

// WriteConfig writes a config with the servers on free loopback ports
// and the lines extra, into a temporary directory of t.
func WriteConfig(t testing.TB, extra string) *Config {
	t.Helper()
	c := &Config{Path: filepath.Join(t.TempDir(), "config.yaml"), Metrics: FreeAddr(t), Health: FreeAddr(t)}
	c.Write(t, extra)
	return c
}

// Write writes the config with extra appended, replacing the file whole
// (write then rename, as a ConfigMap update does). The default dataplane
// is IPVS, which the host's kernel may lack, so the file always names a
// mode: dryrun unless extra has a dataplane section, which must then
// name its mode itself. The default policies.cacheDir is a host path:
// unless extra names one, the daemon runs without the cache. extra may
// start with an apiVersion line of its own.
func (c *Config) Write(t testing.TB, extra string) {
	t.Helper()
	if !strings.Contains("\n"+extra, "\ndataplane:") {
		extra += "dataplane:\n  mode: dryrun\n"
	} else if !strings.Contains(extra, "\n  mode: ") && !strings.Contains(extra, "{mode: ") {
		t.Fatalf("test config's dataplane section names no mode (the default, ipvs, needs the kernel's IPVS):\n%s", extra)
	}
	if !strings.Contains(extra, "cacheDir:") {
		if strings.Contains("\n"+extra, "\npolicies:\n") {
			extra = strings.TrimPrefix(strings.Replace("\n"+extra, "\npolicies:\n", "\npolicies:\n  cacheDir: \"\"\n", 1), "\n")
		} else {
			extra += "policies:\n  cacheDir: \"\"\n"
		}
	}
	apiVersion := "apiVersion: " + APIVersion
	if first, rest, ok := strings.Cut(extra, "\n"); ok && strings.HasPrefix(first, "apiVersion: ") {
		apiVersion, extra = first, rest
	}
	body := fmt.Sprintf("%s\nkind: SwitchyardConfig\nmetrics:\n  bindAddress: %q\nhealth:\n  bindAddress: %q\n%s",
		apiVersion, c.Metrics, c.Health, extra)
	tmp := c.Path + ".tmp"
	if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, c.Path); err != nil {
		t.Fatal(err)
	}
}

// Daemon is one daemon a test runs, in a goroutine (Go: run as main runs
// it, or runDaemon) or as a process of the built binary (Exec): how to
// stop it and what it logged. Only the test goroutine stops it (Cleanup
// functions run on it too).
type Daemon struct {
	Name string
	Logs *Buffer

	ctx    context.Context
	cancel func() // asks the daemon to stop
	kill   func() // ends the process at once (Exec only)
	done   chan error
	// stopped is set once Stop or Halt has collected the result.
	stopped bool
}

// Go runs daemon in a goroutine on a context of its own, derived from
// parent, with logs as its log sink.
func Go(parent context.Context, name string, logs *Buffer, daemon func(ctx context.Context) error) *Daemon {
	d := &Daemon{Name: name, Logs: logs, done: make(chan error, 1)}
	d.ctx, d.cancel = context.WithCancel(parent)
	go func() { d.done <- daemon(d.ctx) }()
	return d
}

// Exec starts the daemon binary bin with args and the environment plus
// env, its stdout and stderr both going to its Logs. Stopping it sends
// SIGTERM, as the kubelet does. Cleanup kills it if the test did not
// stop it.
func Exec(t testing.TB, name, bin string, env []string, args ...string) *Daemon {
	t.Helper()
	return ExecIn(t, nil, name, bin, env, args...)
}

// ExecIn is Exec with the command line behind wrap, such as
// ["ip", "netns", "exec", NS] to run the daemon in a network namespace
// (a wrapper that execs bin, so that the signals reach the daemon).
func ExecIn(t testing.TB, wrap []string, name, bin string, env []string, args ...string) *Daemon {
	t.Helper()
	logs := &Buffer{}
	argv := append(append(append([]string{}, wrap...), bin), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	d := &Daemon{Name: name, Logs: logs, done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	d.ctx = ctx
	d.cancel = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		cancel()
	}
	d.kill = func() {
		_ = cmd.Process.Kill()
		cancel()
	}
	go func() { d.done <- cmd.Wait() }()
	t.Cleanup(func() {
		if !d.stopped {
			d.stopped = true
			_ = cmd.Process.Kill()
			<-d.done
		}
	})
	return d
}

// Context is done once the daemon is asked to stop.
func (d *Daemon) Context() context.Context { return d.ctx }

// Stop asks the daemon to stop and waits for it to end cleanly (run
// returning nil, the process exiting 0): anything else fails the test,
// and so does not ending within 30 s.
func (d *Daemon) Stop(t testing.TB) {
	t.Helper()
	if d.stopped {
		return
	}
	d.stopped = true
	d.cancel()
	select {
	case err := <-d.done:
		if err != nil {
			t.Errorf("%s: after stop = %v, want a clean exit", d.Name, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: did not end within 30s of stop", d.Name)
	}
}

// Halt asks the daemon to stop and waits for it to end, however it
// ends: for the tests that do not check how.
func (d *Daemon) Halt() {
	if d.stopped {
		return
	}
	d.stopped = true
	d.cancel()
	<-d.done
}

// Kill ends the daemon's process at once (SIGKILL: no withdrawal, no
// leave) and waits for it to be gone, failing the test after 30 s. Only
// for a daemon started by Exec or ExecIn.
func (d *Daemon) Kill(t testing.TB) {
	t.Helper()
	if d.kill == nil {
		t.Fatalf("%s: Kill needs a daemon process (Exec)", d.Name)
	}
	if d.stopped {
		return
	}
	d.stopped = true
	d.kill()
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: still running 30s after SIGKILL", d.Name)
	}
}

// LogIfFailed logs what the daemon wrote when the test has failed.
func (d *Daemon) LogIfFailed(t testing.TB) {
	t.Helper()
	if t.Failed() {
		t.Logf("%s logs:\n%s", d.Name, d.Logs.String())
	}
}

// BuildDaemon builds the daemon (cmd/switchyard) into a temporary
// directory of t and returns the binary's path.
func BuildDaemon(t testing.TB) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "switchyard")
	if err := buildDaemon(out); err != nil {
		t.Fatal(err)
	}
	return out
}

var (
	sharedOnce sync.Once
	sharedBin  string
	sharedErr  error
)

// sharedDirPrefix names SharedDaemon's directories; the process id
// follows.
const sharedDirPrefix = "sy-daemon-"

// SharedDaemon builds the daemon once per test process, for suites
// whose tests each start several daemons, into a directory of the
// system's temporary directory named after the process (a test's
// TempDir would go with the first test); directories of earlier
// processes that are gone are removed first.
func SharedDaemon(t testing.TB) string {
	t.Helper()
	sharedOnce.Do(func() {
		if old, err := filepath.Glob(filepath.Join(os.TempDir(), sharedDirPrefix+"*")); err == nil {
			for _, d := range old {
				pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), sharedDirPrefix))
				if err == nil && pid != os.Getpid() && syscall.Kill(pid, 0) == syscall.ESRCH {
					os.RemoveAll(d)
				}
			}
		}
		dir := filepath.Join(os.TempDir(), sharedDirPrefix+strconv.Itoa(os.Getpid()))
		if sharedErr = os.MkdirAll(dir, 0o755); sharedErr != nil {
			return
		}
		sharedBin = filepath.Join(dir, "switchyard")
		began := time.Now()
		if sharedErr = buildDaemon(sharedBin); sharedErr == nil {
			fmt.Fprintf(os.Stderr, "daemon built in %s: %s\n", time.Since(began).Round(time.Millisecond), sharedBin)
		}
	})
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return sharedBin
}

// buildDaemon builds cmd/switchyard into out.
func buildDaemon(out string) error {
	// go test puts its own GOROOT/bin first in PATH.
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("find the go command: %w", err)
	}
	if b, err := exec.Command(goBin, "build", "-o", out, "github.com/switchyard-lb/switchyard/cmd/switchyard").CombinedOutput(); err != nil {
		return fmt.Errorf("build the daemon: %w\n%s", err, b)
	}
	return nil
}

// Metric returns the value of the first sample on the daemon's /metrics
// at metricsAddr whose name and labels start with prefix, or false.
func Metric(metricsAddr, prefix string) (float64, bool) {
	code, body, err := Get("http://" + metricsAddr + "/metrics")
	if err != nil || code != http.StatusOK {
		return 0, false
	}
	v, err := ParseMetric(body, prefix)
	return v, err == nil
}

// ParseMetric returns the value of the first sample of a Prometheus text
// exposition whose name and labels start with prefix: for the suites
// that fetch /metrics their own way (from inside a namespace or guest).
func ParseMetric(body, prefix string) (float64, error) {
	for line := range strings.SplitSeq(body, "\n") {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				return 0, fmt.Errorf("metric %q: %w", prefix, err)
			}
			return v, nil
		}
	}
	return 0, fmt.Errorf("no metric %q", prefix)
}

// DebugState decodes the daemon's /debug/state at metricsAddr into st
// (core/reconcile.State, or a test's own view of it).
func DebugState(metricsAddr string, st any) error {
	code, body, err := Get("http://" + metricsAddr + "/debug/state")
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("/debug/state: %d %s", code, body)
	}
	if err := json.Unmarshal([]byte(body), st); err != nil {
		return fmt.Errorf("/debug/state: %w", err)
	}
	return nil
}

// WaitReady polls the daemon's /readyz at healthAddr until it answers
// 200, failing the test after timeout (give minutes: it bounds a
// failure only).
func WaitReady(t testing.TB, healthAddr string, timeout time.Duration) {
	t.Helper()
	Poll(t, timeout, func() error {
		code, body, err := Get("http://" + healthAddr + "/readyz")
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return errors.New("/readyz = " + strconv.Itoa(code) + " " + strings.TrimSpace(body))
		}
		return nil
	})
}
