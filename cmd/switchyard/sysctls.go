package main

import (
	"fmt"
	"log/slog"

	"github.com/switchyard-lb/switchyard/core/config"
	"github.com/switchyard-lb/switchyard/ipvs"
)

// sysctlHost is what --set-sysctls needs of the node: a way to load the
// ip_vs module, so that net/ipv4/vs/* exist, and /proc/sys.
type sysctlHost struct {
	LoadIPVS func() error
	Sysctls  ipvs.Sysctls
}

// hostSysctls is the running node: loading ip_vs is opening the IPVS
// generic netlink family, which makes the kernel load the module.
func hostSysctls() sysctlHost {
	return sysctlHost{
		LoadIPVS: func() error {
			k, err := ipvs.NewNetlink()
			if err != nil {
				return err
			}
			return k.Close()
		},
		Sysctls: ipvs.ProcSysctls{},
	}
}

// setSysctls applies the kernel parameters cfg's dataplane needs, once:
// the --set-sysctls mode, run by the DaemonSet's privileged init container
// because the daemon's own container sees /proc/sys read-only. The daemon
// then finds every value already right and writes none. The dry-run
// dataplane touches no kernel state, so for it there is nothing to do.
func setSysctls(cfg *config.Config, host sysctlHost, log *slog.Logger) error {
	if cfg.Dataplane.Mode != config.ModeIPVS {
		log.Info("no sysctls to set", "mode", cfg.Dataplane.Mode)
		return nil
	}
	if err := host.LoadIPVS(); err != nil {
		return fmt.Errorf("set sysctls: load ip_vs: %w", err)
	}
	strictARP := cfg.Dataplane.IPVS.StrictARP == nil || *cfg.Dataplane.IPVS.StrictARP
	got, changed, err := ipvs.SetSysctls(host.Sysctls, ipvs.SysctlSettings(strictARP))
	for _, c := range changed {
		log.Info("set sysctl", "name", c.Name, "value", c.Value, "was", c.Was)
	}
	if err != nil {
		return fmt.Errorf("set sysctls: %w", err)
	}
	log.Info("sysctls set", "count", len(got), "changed", len(changed))
	return nil
}
