package node

import (
	"bufio"
	"os/exec"
	"testing"
	"time"
)

// TestProcStop: a recorded process is alive until stopped, a process that
// ignores SIGTERM is killed after the grace period, and a record whose
// start time does not match (a reused pid) is never signalled.
func TestProcStop(t *testing.T) {
	for _, ignoreTerm := range []bool{false, true} {
		script := "echo ready; exec sleep 60"
		if ignoreTerm {
			script = "trap '' TERM; echo ready; while :; do sleep 0.1; done"
		}
		cmd := exec.Command("sh", "-c", script)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Signals only once the trap is set.
		if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
			t.Fatalf("read %q, %v; want ready", line, err)
		}
		go cmd.Wait()
		start, err := startTime(cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		p := proc{Name: "sleep", PID: cmd.Process.Pid, Start: start}
		if !p.alive() {
			t.Fatalf("ignoreTerm=%v: a running process is not alive", ignoreTerm)
		}
		other := proc{Name: "reused", PID: p.PID, Start: start + "0"}
		if other.alive() {
			t.Errorf("a record with another start time is alive")
		}
		other.stop(time.Second)
		if !p.alive() {
			t.Fatalf("stopping a record with another start time signalled the process")
		}
		began := time.Now()
		p.stop(500 * time.Millisecond)
		if p.alive() {
			t.Errorf("ignoreTerm=%v: still alive after stop", ignoreTerm)
		}
		if ignoreTerm && time.Since(began) < 500*time.Millisecond {
			t.Errorf("a process ignoring SIGTERM was gone before the grace period")
		}
		cmd.Process.Kill()
	}
}
