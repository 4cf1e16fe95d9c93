package tuning

import (
	"errors"
	"fmt"
	"io/fs"
	"runtime"
	"strconv"
	"time"

	"github.com/switchyard-lb/switchyard/core/config"
	"github.com/switchyard-lb/switchyard/ipvs"
)

// Host is what Apply needs of the node: a way to load the ip_vs module,
// so that net/ipv4/vs/* (and nf_conntrack's parameters) exist, /proc/sys,
// the nf_conntrack module's parameters and its CPU count.
type Host struct {
	LoadIPVS func() error
	Sysctls  ipvs.Sysctls
	// ConntrackParams holds nf_conntrack's "hashsize".
	ConntrackParams ipvs.Sysctls
	CPUs            func() int
}

// RunningHost is the running node: loading ip_vs is opening the IPVS
// generic netlink family, which makes the kernel load the module; the
// CPUs are the online ones from sysfs, else runtime.NumCPU.
func RunningHost() Host {
	return Host{
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

// Conntrack converts a config's conntrack section, defaults applied, to
// the IPVS dataplane's tuning; an unset field leaves the kernel's value.
func Conntrack(c config.Conntrack) ipvs.ConntrackTuning {
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

// Result is what Apply did, for the caller to report.
type Result struct {
	// Skipped is true when the config's dataplane sets nothing (the dry
	// run touches no kernel state); the other fields are then zero.
	Skipped bool
	// Values are the parameters Apply handled, as they now are.
	Values map[string]string
	// Changed are the parameters it wrote, in order.
	Changed []ipvs.SysctlChange
	// Hashsize is the nf_conntrack hashsize change, nil when there was
	// none.
	Hashsize *ipvs.SysctlChange
	// HashsizeReadOnly, when not nil, is why the hashsize was not raised:
	// /sys is read-only. It is a warning, not in Apply's error.
	HashsizeReadOnly error
	// CPUs is the node's CPU count, and ConntrackMax the nf_conntrack_max
	// it sets (0: left alone).
	CPUs, ConntrackMax int
}

// Apply sets the kernel parameters cfg's dataplane needs and the conntrack
// tuning of cfg's conntrack section, writing only values that differ, so
// that the daemon then finds every value it needs already right. Once
// nf_conntrack_max is set, the module's hashsize is raised to a quarter of
// it if smaller. It goes on past a failed parameter and returns every
// failure, with the Result of what it did.
func Apply(cfg *config.Config, host Host) (Result, error) {
	if cfg.Dataplane.Mode != config.ModeIPVS {
		return Result{Skipped: true}, nil
	}
	if err := host.LoadIPVS(); err != nil {
		return Result{}, fmt.Errorf("load ip_vs: %w", err)
	}
	strictARP := cfg.Dataplane.IPVS.StrictARP == nil || *cfg.Dataplane.IPVS.StrictARP
	tuning := Conntrack(cfg.Conntrack)
	res := Result{CPUs: host.CPUs()}
	res.ConntrackMax = tuning.Max(res.CPUs)
	settings := append(ipvs.SysctlSettings(strictARP), tuning.Settings(res.CPUs)...)
	var err error
	res.Values, res.Changed, err = ipvs.SetSysctls(host.Sysctls, settings)
	limit := res.ConntrackMax
	maxSet := limit > 0 && res.Values[ipvs.ConntrackMaxSysctl] == strconv.Itoa(limit)
	if maxSet {
		c, herr := ipvs.EnsureConntrackHashsize(host.ConntrackParams, limit)
		switch {
		case herr != nil && ipvs.IsReadOnly(herr):
			res.HashsizeReadOnly = herr
		case herr != nil:
			err = errors.Join(err, herr)
		default:
			res.Hashsize = c
		}
	}
	if err != nil && limit > 0 && !maxSet && errors.Is(err, fs.ErrPermission) {
		// The kernel makes nf_conntrack_max read-only outside the host's
		// network namespace: say what to do there.
		err = fmt.Errorf("%w (nf_conntrack_max is writable only from the host's network namespace: "+
			"where nodes are containers or namespaces, set conntrack.maxPerCore: 0, as kind does for kube-proxy)", err)
	}
	return res, err
}
