package node

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is a process the node started, recorded in the state directory
// as "PID STARTTIME" so that a later command stops that process and not
// another that reused its pid.
type proc struct {
	Name  string
	PID   int
	Start string // field 22 of /proc/PID/stat
}

// startProc starts argv inside the node's network namespace (nsenter
// execs it, so the pid is the program's), in a session of its own so that
// it outlives the caller, with its output appended to dir/logs/NAME.log,
// and records it under dir/pids.
func startProc(dir, name string, argv []string, env []string) (proc, error) {
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return proc{}, fmt.Errorf("node: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "pids"), 0o755); err != nil {
		return proc{}, fmt.Errorf("node: %w", err)
	}
	log, err := os.OpenFile(logPath(dir, name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return proc{}, fmt.Errorf("node: log of %s: %w", name, err)
	}
	defer log.Close()
	cmd := exec.Command("nsenter", append([]string{"--net=" + netnsPath, "--"}, argv...)...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return proc{}, fmt.Errorf("node: start %s: %w", name, err)
	}
	p := proc{Name: name, PID: cmd.Process.Pid}
	// Reap it if it dies while this process lives; a later command finds
	// it gone.
	go cmd.Wait()
	p.Start, err = startTime(p.PID)
	if err != nil {
		return proc{}, fmt.Errorf("node: %s exited at once: %w (log %s)", name, err, logPath(dir, name))
	}
	data := fmt.Sprintf("%d %s\n", p.PID, p.Start)
	if err := os.WriteFile(filepath.Join(dir, "pids", name), []byte(data), 0o644); err != nil {
		return proc{}, fmt.Errorf("node: %w", err)
	}
	return p, nil
}

func logPath(dir, name string) string { return filepath.Join(dir, "logs", name+".log") }

// readProcs returns the recorded processes that still run.
func readProcs(dir string) []proc {
	entries, _ := os.ReadDir(filepath.Join(dir, "pids"))
	var out []proc
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, "pids", e.Name()))
		if err != nil {
			continue
		}
		f := strings.Fields(string(data))
		if len(f) != 2 {
			continue
		}
		pid, err := strconv.Atoi(f[0])
		if err != nil || pid <= 0 {
			continue
		}
		p := proc{Name: e.Name(), PID: pid, Start: f[1]}
		if p.alive() {
			out = append(out, p)
		}
	}
	return out
}

// alive reports whether p still runs (same pid, same start time).
func (p proc) alive() bool {
	st, err := startTime(p.PID)
	return err == nil && st == p.Start
}

// stop sends SIGTERM, waits up to grace, then SIGKILLs and waits for the
// process to be gone (a killed process takes a moment to exit).
func (p proc) stop(grace time.Duration) {
	if !p.alive() {
		return
	}
	_ = syscall.Kill(p.PID, syscall.SIGTERM)
	if p.wait(grace) {
		return
	}
	_ = syscall.Kill(p.PID, syscall.SIGKILL)
	p.wait(killWait)
}

// killWait bounds the wait for a SIGKILLed process to exit.
const killWait = 10 * time.Second

// wait reports whether p is gone within d.
func (p proc) wait(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for p.alive() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return true
}

// startTime reads field 22 of /proc/PID/stat (after the parenthesised
// command, which may hold spaces).
func startTime(pid int) (string, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", err
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", errors.New("malformed /proc stat")
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); a zombie has exited.
	if len(f) < 20 || f[0] == "Z" {
		return "", errors.New("process exited")
	}
	return f[19], nil
}
