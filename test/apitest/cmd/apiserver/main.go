// Command apiserver runs the test etcd and kube-apiserver outside tests, for
// make demo and for poking at by hand:
//
//	go run ./test/apitest/cmd/apiserver -dir /tmp/kube
//
// Once the server is ready it writes DIR/kubeconfig (atomically, so a script
// can wait for the file) and prints its path; it runs until SIGINT or
// SIGTERM, or until the process that started it dies. The binaries come
// from -bin, by default $SWITCHYARD_KUBE_BIN (test/tools/kube-binaries.sh).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/switchyard-lb/switchyard/test/apitest/internal/controlplane"
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(untilParentDies(ctx), os.Args[1:], os.Stdout, log); err != nil {
		log.Error("apiserver failed", "err", err)
		os.Exit(1)
	}
}

// run starts the control plane, prints the kubeconfig path to stdout once
// it is ready, and stops it when ctx ends.
func run(ctx context.Context, args []string, stdout io.Writer, log *slog.Logger) error {
	fs := flag.NewFlagSet("apiserver", flag.ContinueOnError)
	dir := fs.String("dir", "", "state directory (PKI, etcd data, logs, kubeconfig); a temporary one, removed at exit, when empty")
	bin := fs.String("bin", os.Getenv("SWITCHYARD_KUBE_BIN"), "directory with etcd and kube-apiserver (default $SWITCHYARD_KUBE_BIN)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *bin == "" {
		return fmt.Errorf("no binaries: pass -bin or set SWITCHYARD_KUBE_BIN to the directory printed by test/tools/kube-binaries.sh")
	}
	if *dir == "" {
		tmp, err := os.MkdirTemp("", "switchyard-apiserver-")
		if err != nil {
			return fmt.Errorf("create state directory: %w", err)
		}
		defer os.RemoveAll(tmp)
		*dir = tmp
	}

	began := time.Now()
	startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	cp, err := controlplane.Start(startCtx, controlplane.Options{BinDir: *bin, Dir: *dir})
	cancel()
	if err != nil {
		return err
	}
	log.Info("API server ready", "url", cp.URL, "kubeconfig", cp.Kubeconfig, "dir", cp.Dir, "took", time.Since(began).Round(time.Millisecond))
	fmt.Fprintln(stdout, cp.Kubeconfig)

	<-ctx.Done()
	log.Info("stopping API server")
	return cp.Stop()
}

// untilParentDies returns a context cancelled when this process is
// re-parented, i.e. whatever started it (go run, a shell script) has died
// without signalling it.
func untilParentDies(ctx context.Context) context.Context {
	ctx, cancel := context.WithCancel(ctx)
	parent := os.Getppid()
	go func() {
		defer cancel()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if os.Getppid() != parent {
					return
				}
			}
		}
	}()
	return ctx
}
