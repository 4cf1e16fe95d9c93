package routers

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-lb/switchyard/test/harness"
	"github.com/switchyard-lb/switchyard/test/netns"
)

// startTimeout bounds how long a router may take to answer after start.
const startTimeout = time.Minute

// FRR is zebra and bgpd running in NS, with their state in Dir.
type FRR struct {
	NS  *netns.NS
	Dir string

	zebra, bfdd, bgpd *exec.Cmd
	args              func(daemon string) []string // the daemons' common arguments
	realtime          bool
}

// StartFRR writes bgpdConf and starts zebra and bgpd in ns. It returns
// once bgpd's vty answers.
func StartFRR(t testing.TB, ns *netns.NS, bgpdConf string) *FRR {
	t.Helper()
	return startFRR(t, ns, bgpdConf, false)
}

// StartFRRWithBFD is StartFRR with bfdd as well, started before bgpd so
// that bgpd's "neighbor ... bfd" registers with it; its control socket
// is in Dir rather than the host's /var/run/frr.
func StartFRRWithBFD(t testing.TB, ns *netns.NS, bgpdConf string) *FRR {
	t.Helper()
	return startFRR(t, ns, bgpdConf, true)
}

func startFRR(t testing.TB, ns *netns.NS, bgpdConf string, bfd bool) *FRR {
	t.Helper()
	r := &FRR{NS: ns, Dir: stateDir(t, "sy-frr-")}
	d := r.Dir
	r.args = func(name string) []string {
		return []string{"-P", "0", "--vty_socket", d, "-z", d + "/zserv.api", "-i", d + "/" + name + ".pid",
			"-f", d + "/" + name + ".conf", "--log", "file:" + d + "/" + name + ".log"}
	}
	common := r.args
	writeFile(t, filepath.Join(d, "zebra.conf"), "hostname "+ns.Name()+"\n")
	writeFile(t, filepath.Join(d, "bgpd.conf"), bgpdConf)
	if out, err := exec.Command("chown", "-R", "frr:frr", d).CombinedOutput(); err != nil {
		t.Fatalf("chown %s: %v: %s", d, err, out)
	}
	r.zebra = ns.Start(t, "/usr/lib/frr/zebra", common("zebra")...)
	harness.Poll(t, startTimeout, func() error {
		_, err := os.Stat(d + "/zserv.api")
		return err
	})
	if bfd {
		writeFile(t, filepath.Join(d, "bfdd.conf"), "")
		if out, err := exec.Command("chown", "frr:frr", filepath.Join(d, "bfdd.conf")).CombinedOutput(); err != nil {
			t.Fatalf("chown bfdd.conf: %v: %s", err, out)
		}
		r.bfdd = ns.Start(t, "/usr/lib/frr/bfdd", append(common("bfdd"), "--bfdctl", d+"/bfdd.sock")...)
		harness.Poll(t, startTimeout, func() error {
			_, err := r.Vtysh("show bfd peers")
			return err
		})
	}
	r.startBGPD(t)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := r.Vtysh("show bgp summary", "show ip bgp")
			t.Logf("FRR:\n%s\nbgpd.log:\n%s", out, tail(d+"/bgpd.log", 3000))
		}
	})
	return r
}

func (r *FRR) startBGPD(t testing.TB) {
	t.Helper()
	r.bgpd = r.NS.Start(t, "/usr/lib/frr/bgpd", r.args("bgpd")...)
	harness.Poll(t, startTimeout, func() error {
		_, err := r.Vtysh("show bgp summary")
		return err
	})
}

// RestartBGPD kills bgpd (SIGKILL: its sessions end without a
// NOTIFICATION, as in a crash or a restart that keeps forwarding) and
// starts it again (FRR 8.4's bgpd has no flag for a planned restart):
// with Peering.RestartTime, zebra keeps bgpd's routes in the FIB
// meanwhile. It returns once the new bgpd's vty answers.
func (r *FRR) RestartBGPD(t testing.TB) {
	t.Helper()
	pid := r.bgpd.Process.Pid
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		t.Fatalf("killing bgpd: %v", err)
	}
	harness.Poll(t, startTimeout, func() error {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("bgpd (pid %d) has not exited yet: %v", pid, err)
		}
		return nil
	})
	r.startBGPD(t)
	if r.realtime {
		realtime(t, r.bgpd)
	}
}

// Realtime gives the FRR daemons realtime priority (SCHED_FIFO), as a
// router on its own hardware is not starved by the nodes' load: on a
// loaded test machine a starved bfdd misses its detection time and
// flaps the sessions it is there to measure. Only the peer suites'
// routers get it; the daemon under test does not.
func (r *FRR) Realtime(t testing.TB) {
	t.Helper()
	r.realtime = true
	realtime(t, r.zebra, r.bfdd, r.bgpd)
}

// realtime sets SCHED_FIFO priority 10 on every thread of the processes
// (nil ones skipped), where the process's cgroup allows it.
func realtime(t testing.TB, procs ...*exec.Cmd) {
	t.Helper()
	for _, p := range procs {
		if p == nil {
			continue
		}
		if out, err := exec.Command("chrt", "-a", "-f", "-p", "10", fmt.Sprint(p.Process.Pid)).CombinedOutput(); err != nil {
			// A cgroup without a realtime budget refuses it: the test
			// still runs, as exposed to the load as the daemon is.
			t.Logf("realtime priority for pid %d refused, it runs without: %v: %s", p.Process.Pid, err, bytes.TrimSpace(out))
		}
	}
}

// Vtysh runs the vtysh commands, in order, and returns their output.
func (r *FRR) Vtysh(cmds ...string) (string, error) {
	args := []string{"--vty_socket", r.Dir}
	for _, c := range cmds {
		args = append(args, "-c", c)
	}
	return r.NS.Exec("vtysh", args...)
}

// BIRD is BIRD 2 running in NS, with its state in Dir.
type BIRD struct {
	NS  *netns.NS
	Dir string

	proc *exec.Cmd
}

// Realtime gives BIRD realtime priority, as FRR.Realtime does.
func (r *BIRD) Realtime(t testing.TB) {
	t.Helper()
	realtime(t, r.proc)
}

// StartBIRD writes conf and starts BIRD in ns. It returns once its
// control socket answers.
func StartBIRD(t testing.TB, ns *netns.NS, conf string) *BIRD {
	t.Helper()
	r := &BIRD{NS: ns, Dir: stateDir(t, "sy-bird-")}
	d := r.Dir
	writeFile(t, filepath.Join(d, "bird.conf"), conf)
	r.proc = ns.Start(t, "/usr/sbin/bird", "-f", "-c", d+"/bird.conf", "-s", d+"/bird.ctl", "-P", d+"/bird.pid")
	harness.Poll(t, startTimeout, func() error {
		_, err := r.Birdc("show", "status")
		return err
	})
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := r.Birdc("show", "protocols", "all")
			t.Logf("BIRD:\n%s", out)
		}
	})
	return r
}

// Birdc runs one birdc command and returns its output.
func (r *BIRD) Birdc(args ...string) (string, error) {
	return r.NS.Exec("birdc", append([]string{"-s", r.Dir + "/bird.ctl"}, args...)...)
}

// stateDir makes a directory the frr user can use (t.TempDir's parents
// are root-only).
func stateDir(t testing.TB, pattern string) string {
	t.Helper()
	d, err := os.MkdirTemp("", pattern)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

func writeFile(t testing.TB, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprint(err)
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
