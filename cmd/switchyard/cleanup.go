package main

import (
	"context"
	"errors"
	"log/slog"

	"github.com/switchyard-lb/switchyard/ipvs/cleanup"
)

// cleanupNode runs --cleanup (what Switchyard owns) and
// --cleanup-kube-proxy (kube-proxy's leftovers) on this node and logs
// what each removed and could not check.
func cleanupNode(ctx context.Context, ours, kubeProxy bool, log *slog.Logger) error {
	h, closeHost, err := cleanup.Open()
	if err != nil {
		return err
	}
	defer closeHost()
	var errs []error
	run := func(what string, fn func(context.Context, cleanup.Host) (cleanup.Report, error)) {
		r, err := fn(ctx, h)
		for _, s := range r.Removed {
			log.Info("removed", "cleanup", what, "object", s)
		}
		for _, s := range r.Skipped {
			log.Warn("not checked", "cleanup", what, "reason", s)
		}
		if err != nil {
			errs = append(errs, err)
			return
		}
		log.Info("cleanup done", "cleanup", what, "removed", len(r.Removed))
	}
	if kubeProxy {
		run("kube-proxy", cleanup.KubeProxy)
	}
	if ours {
		run("switchyard", cleanup.Switchyard)
	}
	return errors.Join(errs...)
}
