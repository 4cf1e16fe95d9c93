package lab

import (
	"os/exec"
	"syscall"
)

// killWithParent makes the kernel kill qemu when labrun dies, even when go
// test kills labrun with SIGKILL: a VM must not outlive its run.
func killWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
