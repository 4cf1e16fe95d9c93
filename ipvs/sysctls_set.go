package ipvs

import (
	"errors"
	"fmt"
	"maps"
)

// sysctlSetting is a kernel parameter the dataplane sets. Optional ones
// are skipped when the kernel lacks them (no IPv6).
type sysctlSetting struct {
	name, value string
	optional    bool
}

// sysctlSettings are the parameters the dataplane needs:
//   - forwarding, for NAT to backends on other hosts;
//   - vs/conntrack=1, so that IPVS flows get conntrack entries that
//     nftables masquerade and the stale-UDP cleanup work on;
//   - vs/expire_nodest_conn=1, so that packets of a connection whose real
//     server was deleted expire it at once instead of being black-holed;
//   - vs/expire_quiescent_template=1, so that persistence templates of a
//     weight-0 real server expire and affinity moves on;
//   - with strictARP, arp_ignore=1 and arp_announce=2, so that only an
//     announcer answers ARP for the addresses on switchyard0.
func (d *Dataplane) sysctlSettings() []sysctlSetting {
	s := []sysctlSetting{
		{name: "net/ipv4/ip_forward", value: "1"},
		{name: "net/ipv6/conf/all/forwarding", value: "1", optional: true},
		{name: "net/ipv4/vs/conntrack", value: "1"},
		{name: "net/ipv4/vs/expire_nodest_conn", value: "1"},
		{name: "net/ipv4/vs/expire_quiescent_template", value: "1"},
	}
	if d.cfg.StrictARP {
		s = append(s,
			sysctlSetting{name: "net/ipv4/conf/all/arp_ignore", value: "1"},
			sysctlSetting{name: "net/ipv4/conf/all/arp_announce", value: "2"})
	}
	return s
}

// reportedSysctls are read and reported, never set. conn_reuse_mode is
// left at the kernel's default: since Linux 5.9 mode 1 no longer delays
// reused connections by a second, and mode 0 would send new connections
// that reuse a port to a draining real server.
var reportedSysctls = []string{"net/ipv4/vs/conn_reuse_mode"}

// ensureSysctls sets what the dataplane needs and records every value it
// set or read, for Sysctls.
func (d *Dataplane) ensureSysctls() error {
	got := map[string]string{}
	var errs []error
	for _, s := range d.sysctlSettings() {
		cur, err := d.cfg.Sysctls.Get(s.name)
		if err != nil {
			if !(s.optional && errors.Is(err, ErrNotFound)) {
				errs = append(errs, err)
			}
			continue
		}
		if cur != s.value {
			if err := d.cfg.Sysctls.Set(s.name, s.value); err != nil {
				errs = append(errs, err)
				got[s.name] = cur
				continue
			}
			d.cfg.Log.Info("set sysctl", "name", s.name, "value", s.value, "was", cur)
		}
		got[s.name] = s.value
	}
	for _, name := range reportedSysctls {
		if v, err := d.cfg.Sysctls.Get(name); err == nil {
			got[name] = v
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("ipvs: sysctls: %w", errors.Join(errs...))
	}
	d.sysctls = got
	return nil
}

// Sysctls returns the kernel parameters the dataplane set or read, by
// /proc/sys path; nil before the first successful Apply set them.
func (d *Dataplane) Sysctls() map[string]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.sysctls)
}
