//go:build !linux

package lab

import "os/exec"

// killWithParent has no portable equivalent; the context still stops qemu.
func killWithParent(*exec.Cmd) {}
