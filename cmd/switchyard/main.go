// Command switchyard is the Switchyard node daemon: it runs on every node,
// in place of kube-proxy, and programs the node's dataplane for the
// cluster's Services.
//
// It only parses flags, builds the packages from the config and runs
// them: the watch (core/k8s), the loop (core/runner, core/reconcile), the
// dataplane (ipvs), the policies (plugins), the LoadBalancer control
// plane (core/lb), and the metrics and health servers; config reloads
// are dispatched to the package each field belongs to.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "switchyard: %v\n", err)
		stop()
		os.Exit(1)
	}
}
