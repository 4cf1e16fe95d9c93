package cleanup

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/ipvs"
)

// Names of the objects each proxy creates.
const (
	SwitchyardDummy = ipvs.DefaultDummy
	// DSRDummy holds the dsr frontends' addresses (docs/dsr.md).
	DSRDummy       = ipvs.DSRDummy
	KubeProxyDummy = "kube-ipvs0"
	// NodePortMin and NodePortMax are kube-proxy's default
	// --service-node-port-range.
	NodePortMin = 30000
	NodePortMax = 32767
)

// Table is an nftables table.
type Table struct {
	// Family is "inet", "ip" or "ip6".
	Family string
	Name   string
}

func (t Table) String() string { return t.Family + " " + t.Name }

// The nftables tables the proxies own.
var (
	SwitchyardTable = Table{Family: "inet", Name: "switchyard"} // ipvs.TableName
	DSRTable        = Table{Family: "inet", Name: ipvs.DSRTableName}
	KubeProxyTables = []Table{{Family: "ip", Name: "kube-proxy"}, {Family: "ip6", Name: "kube-proxy"}}
)

// Kernel is the part of the IPVS table cleanup needs; ipvs.Kernel has it.
type Kernel interface {
	Services() ([]ipvs.Service, error)
	DeleteService(model.VirtualServiceKey) error
}

// Links are the host's network links.
type Links interface {
	// Addrs lists the addresses bound to link name, nil when there is no
	// such link.
	Addrs(name string) ([]netip.Addr, error)
	// LocalAddrs lists the addresses bound to any link.
	LocalAddrs() ([]netip.Addr, error)
	// DeleteDummy deletes the dummy link name and reports whether it
	// existed. A link of that name that is not a dummy link is an error.
	DeleteDummy(name string) (bool, error)
}

// Tables are the host's nftables tables.
type Tables interface {
	// Owned returns the virtual services Switchyard's table records as
	// owned (none without the table).
	Owned() ([]model.VirtualServiceKey, error)
	// Delete deletes a table and reports whether it existed.
	Delete(Table) (bool, error)
}

// Tools runs host programs. A missing program is an error wrapping
// exec.ErrNotFound.
type Tools interface {
	Run(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error)
}

// DSR is the dsr side's state that cleanup reads and removes beyond
// links, tables and services.
type DSR interface {
	// Record reports whether the dsr table exists and the GUE port it
	// records (0 for none).
	Record() (exists bool, guePort uint16, err error)
	// CloseGUE closes a FOU port and reports whether it was open.
	CloseGUE(port uint16) (bool, error)
}

// Host is what cleanup works on. Tools is needed by KubeProxy only; DSR
// by Switchyard, which leaves the dsr side's services and FOU port alone
// without it.
type Host struct {
	Kernel Kernel
	Links  Links
	Tables Tables
	Tools  Tools
	DSR    DSR
}

// Report says what a cleanup removed and what it could not check.
type Report struct {
	// Removed describes each object removed, such as
	// "ipvs service TCP 10.96.0.1:443" or "link kube-ipvs0".
	Removed []string
	// Skipped describes what was not checked, with the reason (a
	// missing program).
	Skipped []string
}

func (r *Report) removed(format string, args ...any) {
	r.Removed = append(r.Removed, fmt.Sprintf(format, args...))
}

// Switchyard removes what Switchyard owns on the host. It stops at the
// first error that would make a later step remove proof of ownership
// still needed (the addresses and the tables prove the services, the dsr
// table the GUE port), so a rerun finishes the job.
//
// The dsr side's firewall-mark services (ipvs.IsDSRMark) are its own
// while the dsr table exists or the dsr link holds addresses, as
// ipvs.DSRState counts them.
func Switchyard(ctx context.Context, h Host) (Report, error) {
	var r Report
	addrs, err := h.Links.Addrs(SwitchyardDummy)
	if err != nil {
		return r, fmt.Errorf("cleanup: addresses of %s: %w", SwitchyardDummy, err)
	}
	dsrAddrs, err := h.Links.Addrs(DSRDummy)
	if err != nil {
		return r, fmt.Errorf("cleanup: addresses of %s: %w", DSRDummy, err)
	}
	owned, err := h.Tables.Owned()
	if err != nil {
		return r, fmt.Errorf("cleanup: owned services: %w", err)
	}
	var dsrTable bool
	var guePort uint16
	if h.DSR != nil {
		if dsrTable, guePort, err = h.DSR.Record(); err != nil {
			return r, fmt.Errorf("cleanup: dsr table: %w", err)
		}
	}
	// The dsr side has peer services only while it has frontends, and
	// then its table and addresses.
	dsrOwned := h.DSR != nil && (dsrTable || len(dsrAddrs) > 0)
	st := ipvs.State{Addrs: make(map[netip.Addr]bool), Recorded: make(map[model.VirtualServiceKey]bool)}
	for _, a := range slices.Concat(addrs, dsrAddrs) {
		st.Addrs[a] = true
	}
	for _, k := range owned {
		st.Recorded[k] = true
	}
	if err := deleteServices(h.Kernel, &r, func(k model.VirtualServiceKey) bool {
		if m, ok := ipvs.MarkOf(k); ok && ipvs.IsDSRMark(m) && dsrOwned {
			return true
		}
		return st.Owns(k)
	}); err != nil {
		return r, err
	}
	if err := ctx.Err(); err != nil {
		return r, err
	}
	if guePort != 0 {
		if ok, err := h.DSR.CloseGUE(guePort); err != nil {
			return r, fmt.Errorf("cleanup: %w", err)
		} else if ok {
			r.removed("fou port %d (gue)", guePort)
		}
	}
	for _, t := range []Table{SwitchyardTable, DSRTable} {
		if ok, err := h.Tables.Delete(t); err != nil {
			return r, fmt.Errorf("cleanup: delete nftables table %s: %w", t, err)
		} else if ok {
			r.removed("nftables table %s", t)
		}
	}
	for _, name := range []string{SwitchyardDummy, DSRDummy} {
		if ok, err := h.Links.DeleteDummy(name); err != nil {
			return r, fmt.Errorf("cleanup: %w", err)
		} else if ok {
			r.removed("link %s", name)
		}
	}
	return r, nil
}

// KubeProxy removes kube-proxy's leftovers from the host. It goes on
// after a failed step (each is independent but for the order: IPVS
// services before kube-ipvs0, iptables before ipsets) and returns every
// error, joined.
func KubeProxy(ctx context.Context, h Host) (Report, error) {
	var r Report
	var errs []error
	if err := kubeProxyIPVS(h, &r); err != nil {
		errs = append(errs, err)
	} else if ok, err := h.Links.DeleteDummy(KubeProxyDummy); err != nil {
		errs = append(errs, fmt.Errorf("cleanup: %w", err))
	} else if ok {
		r.removed("link %s", KubeProxyDummy)
	}
	iptErr := kubeProxyIPTables(ctx, h.Tools, &r)
	errs = append(errs, iptErr)
	if iptErr == nil {
		errs = append(errs, kubeProxyIPSets(ctx, h.Tools, &r))
	} else {
		r.Skipped = append(r.Skipped, "ipsets: kept while iptables rules may still use them")
	}
	for _, t := range KubeProxyTables {
		if ok, err := h.Tables.Delete(t); err != nil {
			errs = append(errs, fmt.Errorf("cleanup: delete nftables table %s: %w", t, err))
		} else if ok {
			r.removed("nftables table %s", t)
		}
	}
	return r, errors.Join(errs...)
}

// kubeProxyIPVS deletes the IPVS services kube-proxy's IPVS mode made:
// those on kube-ipvs0's addresses and the NodePorts on the node's other
// addresses, but never one Switchyard owns (on switchyard0's or
// switchyard-dsr's addresses, or recorded).
func kubeProxyIPVS(h Host, r *Report) error {
	kube, err := h.Links.Addrs(KubeProxyDummy)
	if err != nil {
		return fmt.Errorf("cleanup: addresses of %s: %w", KubeProxyDummy, err)
	}
	local, err := h.Links.LocalAddrs()
	if err != nil {
		return fmt.Errorf("cleanup: local addresses: %w", err)
	}
	ours, err := h.Links.Addrs(SwitchyardDummy)
	if err != nil {
		return fmt.Errorf("cleanup: addresses of %s: %w", SwitchyardDummy, err)
	}
	dsr, err := h.Links.Addrs(DSRDummy)
	if err != nil {
		return fmt.Errorf("cleanup: addresses of %s: %w", DSRDummy, err)
	}
	ours = append(ours, dsr...)
	owned, err := h.Tables.Owned()
	if err != nil {
		return fmt.Errorf("cleanup: owned services: %w", err)
	}
	return deleteServices(h.Kernel, r, func(k model.VirtualServiceKey) bool {
		if slices.Contains(ours, k.Addr) || slices.Contains(owned, k) {
			return false
		}
		if slices.Contains(kube, k.Addr) {
			return true
		}
		return slices.Contains(local, k.Addr) && k.Port >= NodePortMin && k.Port <= NodePortMax
	})
}

func deleteServices(k Kernel, r *Report, remove func(model.VirtualServiceKey) bool) error {
	svcs, err := k.Services()
	if err != nil {
		return fmt.Errorf("cleanup: %w", err)
	}
	var errs []error
	for _, s := range svcs {
		if !remove(s.VirtualServiceKey) {
			continue
		}
		err := k.DeleteService(s.VirtualServiceKey)
		switch {
		case errors.Is(err, ipvs.ErrNotFound):
		case err != nil:
			errs = append(errs, fmt.Errorf("cleanup: %w", err))
		default:
			r.removed("ipvs service %s", describe(s.VirtualServiceKey))
		}
	}
	return errors.Join(errs...)
}

func describe(k model.VirtualServiceKey) string {
	if m, ok := ipvs.MarkOf(k); ok {
		return fmt.Sprintf("FWM %#x", m)
	}
	return fmt.Sprintf("%s %s", k.Protocol, netip.AddrPortFrom(k.Addr, k.Port))
}

// missing reports whether err says a program is not installed.
func missing(err error) bool { return errors.Is(err, exec.ErrNotFound) }
