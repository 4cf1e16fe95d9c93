// Command yardctl is Switchyard's command-line tool: it builds, checks,
// packs and applies balancing policies (yardctl policy), reads a running
// daemon's state, including the policy version each Service runs
// (yardctl state), and reports the build's version. Every command has
// --help, prints machine-readable output with -o json, and fails with a
// one-line reason and a non-zero exit status.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
