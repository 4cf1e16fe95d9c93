package main

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"runtime"
	"strconv"
	"time"

	"github.com/switchyard-lb/switchyard/core/config"
	"github.com/switchyard-lb/switchyard/ipvs"
)

// sysctlHost is what --set-sysctls needs of the node: a way to load the
// ip_vs module, so that net/ipv4/vs/* (and nf_conntrack's parameters)
// exist, /proc/sys, the nf_conntrack module's parameters and its CPU
// count.
type sysctlHost struct {
	LoadIPVS func() error
	Sysctls  ipvs.Sysctls
	// ConntrackParams holds nf_conntrack's "hashsize".
	ConntrackParams ipvs.Sysctls
	CPUs            func() int
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
		Sysctls:         ipvs.ProcSysctls{},
		ConntrackParams: ipvs.ProcSysctls{Root: ipvs.ConntrackParams},
		CPUs: func() int {
			if n, err := ipvs.OnlineCPUs("/sys"); err == nil && n > 0 {
				return n
			}
			return runtime.NumCPU()
		},
	}
}

// conntrackTuning is cfg's conntrack section, defaults applied.
func conntrackTuning(c config.Conntrack) ipvs.ConntrackTuning {
	deref := func(p *int) int {
		if p == nil {
			return 0
		}
		return *p
	}
	dur := func(p *config.Duration) time.Duration {
		if p == nil {
			return 0
		}
		return p.Std()
	}
	return ipvs.ConntrackTuning{
		MaxPerCore: deref(c.MaxPerCore), Min: deref(c.Min),
		TCPEstablishedTimeout: dur(c.TCPEstablishedTimeout), TCPCloseWaitTimeout: dur(c.TCPCloseWaitTimeout),
		UDPTimeout: c.UDPTimeout.Std(), UDPStreamTimeout: c.UDPStreamTimeout.Std(),
	}
}

// setSysctls applies the kernel parameters cfg's dataplane needs and the
// conntrack tuning of cfg's conntrack section, once: the --set-sysctls
// mode, run by the DaemonSet's privileged init container because the
// daemon's own container sees /proc/sys read-only. The daemon then finds
// every value it needs already right and writes none. As kube-proxy does,
// once nf_conntrack_max is set the module's hashsize is raised to a
// quarter of it; a read-only /sys only warns. The dry-run dataplane
// touches no kernel state, so for it there is nothing to do.
func setSysctls(cfg *config.Config, host sysctlHost, log *slog.Logger) error {
	if cfg.Dataplane.Mode != config.ModeIPVS {
		log.Info("no sysctls to set", "mode", cfg.Dataplane.Mode)
		return nil
	}
	if err := host.LoadIPVS(); err != nil {
		return fmt.Errorf("set sysctls: load ip_vs: %w", err)
	}
	strictARP := cfg.Dataplane.IPVS.StrictARP == nil || *cfg.Dataplane.IPVS.StrictARP
	tuning := conntrackTuning(cfg.Conntrack)
	cpus := host.CPUs()
	settings := append(ipvs.SysctlSettings(strictARP), tuning.Settings(cpus)...)
	got, changed, err := ipvs.SetSysctls(host.Sysctls, settings)
	for _, c := range changed {
		log.Info("set sysctl", "name", c.Name, "value", c.Value, "was", c.Was)
	}
	if limit := tuning.Max(cpus); limit > 0 && got[ipvs.ConntrackMaxSysctl] == strconv.Itoa(limit) {
		c, herr := ipvs.EnsureConntrackHashsize(host.ConntrackParams, limit)
		switch {
		case herr != nil && ipvs.IsReadOnly(herr):
			log.Warn("conntrack hashsize not raised: /sys is read-only", "nf_conntrack_max", limit, "err", herr)
		case herr != nil:
			err = errors.Join(err, herr)
		case c != nil:
			log.Info("set conntrack hashsize", "value", c.Value, "was", c.Was)
		}
	}
	if limit := tuning.Max(cpus); err != nil && limit > 0 && got[ipvs.ConntrackMaxSysctl] != strconv.Itoa(limit) && errors.Is(err, fs.ErrPermission) {
		// The kernel makes nf_conntrack_max read-only outside the host's
		// network namespace: say what to do there.
		err = fmt.Errorf("%w (nf_conntrack_max is writable only from the host's network namespace: "+
			"where nodes are containers or namespaces, set conntrack.maxPerCore: 0, as kind does for kube-proxy)", err)
	}
	if err != nil {
		return fmt.Errorf("set sysctls: %w", err)
	}
	log.Info("sysctls set", "count", len(got), "changed", len(changed), "cpus", cpus)
	return nil
}
