package netns

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	vnetns "github.com/vishvananda/netns"
)

// prefix makes namespace names unique per test process.
var prefix = "sy" + strconv.Itoa(os.Getpid()) + "-"

var (
	seq       atomic.Uint64
	probeOnce sync.Once
	probeErr  error
)

// RequiredEnv, when set (make test-peers sets it), turns the skips of
// peer tests whose environment is missing into failures.
const RequiredEnv = "SWITCHYARD_PEERS"

// Required reports whether RequiredEnv is set.
func Required() bool { return os.Getenv(RequiredEnv) != "" }

// Require skips t when the environment cannot run namespace tests: not
// root, no ip(8), or namespaces unsupported. It also deletes namespaces
// left behind by earlier test processes that no longer exist. Under
// RequiredEnv a missing environment fails t instead.
func Require(t testing.TB) {
	t.Helper()
	probeOnce.Do(func() { probeErr = probe() })
	if probeErr != nil {
		if Required() {
			t.Fatalf("network namespace tests need root and ip(8): %v (%s is set: make test-peers runs them)", probeErr, RequiredEnv)
		}
		t.Skipf("network namespace tests need root and ip(8): %v", probeErr)
	}
}

func probe() error {
	if os.Geteuid() != 0 {
		return errors.New("not running as root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("looking up ip: %w", err)
	}
	removeStale()
	name := prefix + "probe"
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns add: %w: %s", err, bytes.TrimSpace(out))
	}
	if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns del: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// removeStale deletes namespaces named sy<pid>-… whose process is gone.
func removeStale() {
	entries, err := os.ReadDir("/run/netns")
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), "sy")
		if !ok {
			continue
		}
		pidStr, _, ok := strings.Cut(rest, "-")
		if !ok {
			continue
		}
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat("/proc/" + pidStr); err == nil || pid <= 0 {
			continue
		}
		destroy(e.Name())
	}
}

// NS is a network namespace created for one test.
type NS struct {
	name string
}

// New creates a namespace whose name ends in name, with lo up and IPv6
// duplicate address detection off. Cleanup kills every process left in it
// and deletes it.
func New(t testing.TB, name string) *NS {
	t.Helper()
	full := fmt.Sprintf("%s%d-%s", prefix, seq.Add(1), name)
	if out, err := exec.Command("ip", "netns", "add", full).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", full, err, bytes.TrimSpace(out))
	}
	n := &NS{name: full}
	t.Cleanup(func() { destroy(full) })
	n.Run(t, "ip", "link", "set", "lo", "up")
	// Tentative IPv6 addresses cannot be used as sources: turn duplicate
	// address detection off, link-local addresses included. Best effort,
	// as IPv6 may be disabled.
	_, _ = n.Exec("sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0")
	return n
}

// destroy kills the processes in namespace name and deletes it.
func destroy(name string) {
	out, _ := exec.Command("ip", "netns", "pids", name).Output()
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 && pid != os.Getpid() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	_ = exec.Command("ip", "netns", "del", name).Run()
}

// Name returns the namespace's name as ip(8) knows it.
func (n *NS) Name() string { return n.name }

// Exec runs cmd inside the namespace and returns its standard output.
// Standard error is discarded on success and included in the error
// otherwise, so output meant for parsing (JSON) stays clean.
func (n *NS) Exec(cmd string, args ...string) (string, error) {
	c := exec.Command("ip", append([]string{"netns", "exec", n.name, cmd}, args...)...)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s in netns %s: %w: %s",
			cmd, strings.Join(args, " "), n.name, err,
			bytes.TrimSpace(append(stdout.Bytes(), stderr.Bytes()...)))
	}
	return stdout.String(), nil
}

// Run is Exec that fails the test on error.
func (n *NS) Run(t testing.TB, cmd string, args ...string) string {
	t.Helper()
	out, err := n.Exec(cmd, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Start runs cmd in the background inside the namespace, with its output
// in a log file under t.TempDir. The process group is killed at Cleanup,
// and the log's path and tail are logged if the test failed.
func (n *NS) Start(t testing.TB, cmd string, args ...string) *exec.Cmd {
	t.Helper()
	logPath := fmt.Sprintf("%s/%s-%d.log", t.TempDir(), sanitize(cmd), seq.Add(1))
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatalf("creating log for %s: %v", cmd, err)
	}
	c := exec.Command("ip", append([]string{"netns", "exec", n.name, cmd}, args...)...)
	c.Stdout, c.Stderr = f, f
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		f.Close()
		t.Fatalf("starting %s in netns %s: %v", cmd, n.name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = c.Wait()
		f.Close()
		close(done)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
		if t.Failed() {
			t.Logf("%s %s: log %s:\n%s", cmd, strings.Join(args, " "), logPath, tail(logPath, 4096))
		}
	})
	return c
}

func sanitize(s string) string {
	s = s[strings.LastIndexByte(s, '/')+1:]
	return strings.Map(func(r rune) rune {
		if r == '/' || r == ' ' {
			return '_'
		}
		return r
	}, s)
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// Do runs fn on a locked OS thread that has joined the namespace. The
// thread is discarded afterwards, never returned to the Go scheduler.
// Sockets opened by fn stay in the namespace; goroutines fn starts do not
// run in it.
func (n *NS) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		// No UnlockOSThread: the goroutine exits while locked, so the
		// runtime terminates the thread instead of reusing it.
		runtime.LockOSThread()
		h, err := vnetns.GetFromName(n.name)
		if err != nil {
			errc <- fmt.Errorf("opening netns %s: %w", n.name, err)
			return
		}
		defer h.Close()
		if err := vnetns.Set(h); err != nil {
			errc <- fmt.Errorf("entering netns %s: %w", n.name, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// Switch is a namespace holding a Linux bridge br0 with STP and multicast
// snooping off; Attach plugs namespaces into it.
type Switch struct {
	*NS
	ports atomic.Uint64
}

// NewBridge creates a switch namespace.
func NewBridge(t testing.TB, name string) *Switch {
	t.Helper()
	s := &Switch{NS: New(t, name)}
	s.Run(t, "ip", "link", "add", "br0", "type", "bridge",
		"stp_state", "0", "forward_delay", "0", "mcast_snooping", "0")
	s.Run(t, "ip", "link", "set", "br0", "up")
	return s
}

// Attach connects n to the bridge with a veth pair whose end in n is
// called ifname and has mac (when non-nil) and addrs (IPv6 ones without
// duplicate address detection), and brings both ends up.
func (s *Switch) Attach(t testing.TB, n *NS, ifname string, mac net.HardwareAddr, addrs ...netip.Prefix) {
	t.Helper()
	port := "p" + strconv.FormatUint(s.ports.Add(1), 10)
	s.Run(t, "ip", "link", "add", port, "type", "veth", "peer", "name", ifname, "netns", n.name)
	s.Run(t, "ip", "link", "set", port, "master", "br0")
	s.Run(t, "ip", "link", "set", port, "up")
	if mac != nil {
		n.Run(t, "ip", "link", "set", ifname, "address", mac.String())
	}
	for _, p := range addrs {
		args := []string{"addr", "add", p.String(), "dev", ifname}
		if p.Addr().Is6() {
			args = append(args, "nodad")
		}
		n.Run(t, "ip", args...)
	}
	n.Run(t, "ip", "link", "set", ifname, "up")
}
