package main

import (
	"fmt"
	"log/slog"

	"github.com/switchyard-lb/switchyard/core/config"
	"github.com/switchyard-lb/switchyard/ipvs/tuning"
)

// setSysctls is the --set-sysctls mode: it applies cfg's kernel tuning
// on host once (ipvs/tuning) and logs what it did.
func setSysctls(cfg *config.Config, host tuning.Host, log *slog.Logger) error {
	res, err := tuning.Apply(cfg, host)
	if res.Skipped {
		log.Info("no sysctls to set", "mode", cfg.Dataplane.Mode)
		return nil
	}
	for _, c := range res.Changed {
		log.Info("set sysctl", "name", c.Name, "value", c.Value, "was", c.Was)
	}
	if res.HashsizeReadOnly != nil {
		log.Warn("conntrack hashsize not raised: /sys is read-only", "nf_conntrack_max", res.ConntrackMax, "err", res.HashsizeReadOnly)
	}
	if c := res.Hashsize; c != nil {
		log.Info("set conntrack hashsize", "value", c.Value, "was", c.Was)
	}
	if err != nil {
		return fmt.Errorf("set sysctls: %w", err)
	}
	log.Info("sysctls set", "count", len(res.Values), "changed", len(res.Changed), "cpus", res.CPUs)
	return nil
}
