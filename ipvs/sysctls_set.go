package ipvs

import (
	"errors"
	"fmt"
	"maps"
)

// SysctlSetting is a kernel parameter the dataplane sets, by /proc/sys
// path. Optional ones are skipped when the kernel lacks them (no IPv6).
type SysctlSetting struct {
	Name, Value string
	Optional    bool
}

// SysctlSettings returns the parameters the dataplane needs:
//   - forwarding, for NAT to backends on other hosts;
//   - vs/conntrack=1, so that IPVS flows get conntrack entries that
//     nftables masquerade and the stale-UDP cleanup work on;
//   - vs/expire_nodest_conn=1, so that packets of a connection whose real
//     server was deleted expire it at once instead of being black-holed;
//   - vs/expire_quiescent_template=1, so that persistence templates of a
//     weight-0 real server expire and affinity moves on;
//   - with strictARP, arp_ignore=1 and arp_announce=2, so that only an
//     announcer answers ARP for the addresses on switchyard0.
//
// The net/ipv4/vs/ entries exist only once the ip_vs module is loaded.
func SysctlSettings(strictARP bool) []SysctlSetting {
	s := []SysctlSetting{
		{Name: "net/ipv4/ip_forward", Value: "1"},
		{Name: "net/ipv6/conf/all/forwarding", Value: "1", Optional: true},
		{Name: "net/ipv4/vs/conntrack", Value: "1"},
		{Name: "net/ipv4/vs/expire_nodest_conn", Value: "1"},
		{Name: "net/ipv4/vs/expire_quiescent_template", Value: "1"},
	}
	if strictARP {
		s = append(s,
			SysctlSetting{Name: "net/ipv4/conf/all/arp_ignore", Value: "1"},
			SysctlSetting{Name: "net/ipv4/conf/all/arp_announce", Value: "2"})
	}
	return s
}

// SysctlChange is a parameter SetSysctls wrote: its new and former value.
type SysctlChange struct {
	Name, Value, Was string
}

// SetSysctls writes each of settings whose current value differs (so that
// it needs no write access when all are right already) and returns the
// resulting values by name, and what it changed. It goes on past a failed
// parameter and returns every failure joined.
func SetSysctls(s Sysctls, settings []SysctlSetting) (map[string]string, []SysctlChange, error) {
	got := map[string]string{}
	var changed []SysctlChange
	var errs []error
	for _, st := range settings {
		cur, err := s.Get(st.Name)
		if err != nil {
			if !(st.Optional && errors.Is(err, ErrNotFound)) {
				errs = append(errs, err)
			}
			continue
		}
		if cur != st.Value {
			if err := s.Set(st.Name, st.Value); err != nil {
				errs = append(errs, err)
				got[st.Name] = cur
				continue
			}
			changed = append(changed, SysctlChange{Name: st.Name, Value: st.Value, Was: cur})
		}
		got[st.Name] = st.Value
	}
	if len(errs) > 0 {
		return got, changed, fmt.Errorf("ipvs: sysctls: %w", errors.Join(errs...))
	}
	return got, changed, nil
}

// reportedSysctls are read and reported, never set. conn_reuse_mode is
// left at the kernel's default: since Linux 5.9 mode 1 no longer delays
// reused connections by a second, and mode 0 would send new connections
// that reuse a port to a draining real server.
var reportedSysctls = []string{"net/ipv4/vs/conn_reuse_mode"}

// ensureSysctls sets what the dataplane needs and records every value it
// set or read, for Sysctls.
func (d *Dataplane) ensureSysctls() error {
	got, changed, err := SetSysctls(d.cfg.Sysctls, SysctlSettings(d.cfg.StrictARP))
	for _, c := range changed {
		d.cfg.Log.Info("set sysctl", "name", c.Name, "value", c.Value, "was", c.Was)
	}
	if err != nil {
		return err
	}
	for _, name := range reportedSysctls {
		if v, err := d.cfg.Sysctls.Get(name); err == nil {
			got[name] = v
		}
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
