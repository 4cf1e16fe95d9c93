// Command yardctl is Switchyard's command-line tool: it reads a running
// daemon's state and reports the build's version (policy commands join
// later). Every command has --help, prints machine-readable output with
// -o json, and fails with a one-line reason and a non-zero exit status.
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
