package controlplane

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// stopTimeout is how long a process gets to exit after SIGTERM before it is
// killed.
const stopTimeout = 15 * time.Second

// process is one running child with its log file.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the process has exited; err is then set
	err     error
}

// startProcess starts bin with args and env, its output appended to logPath.
//
// The child is started, and waited for, on an OS thread locked for its
// whole life. Pdeathsig (sysProcAttr) fires when the thread that started
// the child exits, not the process (golang/go#27505), and the Go runtime
// ends a thread whose goroutine exits while locked to it, as namespace
// helpers do (test/netns Do). Started from any thread, etcd or
// kube-apiserver would be SIGKILLed whenever such a helper happened to run
// on that thread.
func startProcess(name, bin string, args, env []string, logPath string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr()
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Unlocked only once the child is gone: the thread may then be
		// reused, or ended, without harm.
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	if err := <-started; err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return p, nil
}

// exited reports why the process exited, or nil while it runs.
func (p *process) exited() error {
	select {
	case <-p.done:
		if p.err == nil {
			return fmt.Errorf("%s exited: status 0", p.name)
		}
		return fmt.Errorf("%s exited: %w", p.name, p.err)
	default:
		return nil
	}
}

// stop sends SIGTERM, waits up to stopTimeout, then kills. It returns once
// the process is gone, with an error when it had to be killed.
func (p *process) stop() error {
	killed, err := p.stopWithin(stopTimeout)
	if err == nil && killed {
		err = fmt.Errorf("%s did not exit within %s of SIGTERM and was killed", p.name, stopTimeout)
	}
	return err
}

// stopWithin sends SIGTERM and kills the process if it has not exited
// within grace. It returns once the process is gone, saying whether it
// had to be killed.
func (p *process) stopWithin(grace time.Duration) (killed bool, err error) {
	select {
	case <-p.done:
		return false, nil
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return false, fmt.Errorf("signal %s: %w", p.name, err)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.done:
		return false, nil
	case <-timer.C:
	}
	return true, p.kill()
}

// kill kills the process at once and returns once it is gone.
func (p *process) kill() error {
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %s: %w", p.name, err)
	}
	<-p.done
	return nil
}

// tail returns the last n lines of the log.
func (p *process) tail(n int) string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(cannot read %s log: %v)", p.name, err)
	}
	return lastLines(data, n)
}

func lastLines(data []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if n <= 0 || len(data) == 0 {
		return ""
	}
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
