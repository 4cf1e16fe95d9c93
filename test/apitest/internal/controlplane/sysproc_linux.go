package controlplane

import "syscall"

// sysProcAttr makes the kernel kill a child when the process that started it
// dies, so a killed test run leaves no etcd or kube-apiserver behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
