package controlplane

import (
	"path/filepath"
	"runtime"
	"testing"
)

// TestProcessSurvivesEndedThreads: a child started by startProcess keeps
// running while goroutines of this process end their OS threads (exit
// while locked, as namespace helpers do). Its Pdeathsig must follow the
// process, not whichever thread happened to start it.
func TestProcessSurvivesEndedThreads(t *testing.T) {
	p, err := startProcess("sleep", "/bin/sleep", []string{"60"}, nil, filepath.Join(t.TempDir(), "sleep.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.kill()
	for range 50 {
		done := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			close(done)
			// Returning while locked ends the thread.
		}()
		<-done
	}
	if err := p.exited(); err != nil {
		t.Fatalf("child died while threads ended: %v", err)
	}
}
