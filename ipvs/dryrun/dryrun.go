package dryrun

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/ipvs"
)

// Name is the dataplane's name.
const Name = "dryrun"

// Dataplane is an in-memory plugin.Dataplane. It is goroutine-safe:
// Apply may run while other goroutines render the table.
type Dataplane struct {
	mu       sync.Mutex
	services map[model.ServiceKey][]model.VirtualService
	stats    Stats
}

var _ plugin.Dataplane = (*Dataplane)(nil)

// Stats counts what Apply did.
type Stats struct {
	Applies     int // successful Apply calls
	FullApplies int // of which had Full set
	// LastChanged are the Services the last incremental Apply replaced.
	LastChanged []model.ServiceKey
}

// New returns an empty dry-run dataplane.
func New() *Dataplane {
	return &Dataplane{services: make(map[model.ServiceKey][]model.VirtualService)}
}

// Name returns "dryrun".
func (d *Dataplane) Name() string { return Name }

// Apply records the virtual services of u.Plan: all of them when u.Full is
// set, else only those of the Services in u.Changed (a Service absent from
// the plan loses its virtual services).
func (d *Dataplane) Apply(ctx context.Context, u plugin.Update) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dryrun: apply: %w", err)
	}
	if u.Plan == nil {
		return errors.New("dryrun: apply: update has no plan")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stats.Applies++
	if u.Full {
		d.stats.FullApplies++
		d.stats.LastChanged = nil
		clear(d.services)
		for k, sp := range u.Plan.Services {
			d.set(k, sp)
		}
		return nil
	}
	d.stats.LastChanged = slices.Clone(u.Changed)
	for _, k := range u.Changed {
		d.set(k, u.Plan.Services[k])
	}
	return nil
}

func (d *Dataplane) set(k model.ServiceKey, sp *model.ServicePlan) {
	if sp == nil || len(sp.VirtualServices) == 0 {
		delete(d.services, k)
		return
	}
	// Keep copies: the plan belongs to the caller.
	vss := slices.Clone(sp.VirtualServices)
	for i := range vss {
		vss[i].Flags = slices.Clone(vss[i].Flags)
		vss[i].SourceRanges = slices.Clone(vss[i].SourceRanges)
		vss[i].Destinations = slices.Clone(vss[i].Destinations)
	}
	d.services[k] = vss
}

// Close keeps the table, as a real dataplane keeps forwarding.
func (d *Dataplane) Close() error { return nil }

// Stats returns what Apply did so far.
func (d *Dataplane) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.stats
	s.LastChanged = slices.Clone(s.LastChanged)
	return s
}

// Table returns the virtual services in the order `ipvsadm -Ln` lists
// them. The plan gives each virtual service to one Service (core/plan
// arbitrates the ones several Services want), so each is listed once.
func (d *Dataplane) Table() []model.VirtualService {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []model.VirtualService
	for _, vss := range d.services {
		for _, vs := range vss {
			vs.Flags = slices.Clone(vs.Flags)
			vs.SourceRanges = slices.Clone(vs.SourceRanges)
			vs.Destinations = slices.Clone(vs.Destinations)
			slices.SortFunc(vs.Destinations, compareDestinations)
			out = append(out, vs)
		}
	}
	slices.SortFunc(out, func(a, b model.VirtualService) int { return compareServices(a.VirtualServiceKey, b.VirtualServiceKey) })
	return out
}

// Serves reports whether the table has a virtual service on addr.
func (d *Dataplane) Serves(addr netip.Addr) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, vss := range d.services {
		for _, vs := range vss {
			if vs.Addr == addr {
				return true
			}
		}
	}
	return false
}

// WriteTo writes the table as `ipvsadm -Ln` prints it.
func (d *Dataplane) WriteTo(w io.Writer) (int64, error) {
	n, err := io.WriteString(w, Format(d.Table()))
	return int64(n), err
}

// String returns the table as `ipvsadm -Ln` prints it.
func (d *Dataplane) String() string { return Format(d.Table()) }

// Format returns vss, in their order, byte for byte as ipvsadm 1.31 lists a
// kernel table with `ipvsadm -Ln` (print_title and print_service_entry in
// ipvsadm.c): the version line, the two title lines, then per virtual
// service "PROT  ADDR:PORT SCHED" with its scheduler flags and persistence,
// and one line per real server with the fixed-width columns ipvsadm pads
// (including their trailing spaces). Counters are always 0.
func Format(vss []model.VirtualService) string {
	var w strings.Builder
	w.WriteString("IP Virtual Server version 1.2.1 (size=4096)\n")
	w.WriteString("Prot LocalAddress:Port Scheduler Flags\n")
	w.WriteString("  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn\n")
	for _, vs := range vss {
		fmt.Fprintf(&w, "%s  %s %s", protoName(vs.Protocol), addrPort(vs.Addr, vs.Port), vs.Scheduler)
		if len(vs.Flags) > 0 {
			fmt.Fprintf(&w, " (%s)", strings.Join(sortFlags(vs.Flags), ","))
		}
		if vs.AffinityTimeout > 0 {
			fmt.Fprintf(&w, " persistent %d", uint32(vs.AffinityTimeout.Seconds()))
		}
		w.WriteByte('\n')
		for _, dst := range vs.Destinations {
			fmt.Fprintf(&w, "  -> %-28s %-7s %-6d %-10d %-10d\n", addrPort(dst.Addr, dst.Port), "Masq", dst.Weight, 0, 0)
		}
	}
	return w.String()
}

func protoName(p model.Protocol) string {
	switch p {
	case model.TCP:
		return "TCP"
	case model.UDP:
		return "UDP"
	}
	return "SCTP" // ipvsadm prints any other protocol so
}

// addrPort formats as ipvsadm -n does: IPv6 addresses in brackets.
func addrPort(a netip.Addr, port uint16) string {
	return netip.AddrPortFrom(a, port).String()
}

// sortFlags orders scheduler flags as ipvsadm prints them: by flag bit,
// *-fallback (flag-1) before *-port (flag-2) before flag-3; unknown flags
// keep their order after those.
func sortFlags(flags []string) []string {
	rank := func(f string) int {
		switch {
		case strings.HasSuffix(f, "-fallback") || f == "flag-1":
			return 0
		case strings.HasSuffix(f, "-port") || f == "flag-2":
			return 1
		case f == "flag-3":
			return 2
		}
		return 3
	}
	out := slices.Clone(flags)
	slices.SortStableFunc(out, func(a, b string) int { return cmp.Compare(rank(a), rank(b)) })
	return out
}

// ipvsProto is the IP protocol number ipvsadm sorts by.
func ipvsProto(p model.Protocol) int {
	switch p {
	case model.TCP:
		return 6
	case model.UDP:
		return 17
	case model.SCTP:
		return 132
	}
	return 256 + int(p)
}

// compareServices orders as libipvs' ipvs_cmp_services: address family
// (IPv4 first), protocol number, address, port.
func compareServices(a, b model.VirtualServiceKey) int {
	if c := cmp.Compare(family(a.Addr), family(b.Addr)); c != 0 {
		return c
	}
	if c := cmp.Compare(ipvsProto(a.Protocol), ipvsProto(b.Protocol)); c != 0 {
		return c
	}
	if c := a.Addr.Compare(b.Addr); c != 0 {
		return c
	}
	return cmp.Compare(a.Port, b.Port)
}

// compareDestinations orders as libipvs' ipvs_cmp_dests: address, port.
func compareDestinations(a, b model.Destination) int {
	if c := a.Addr.Compare(b.Addr); c != 0 {
		return c
	}
	return cmp.Compare(a.Port, b.Port)
}

func family(a netip.Addr) int {
	if a.Is4() {
		return 4
	}
	return 6
}

var _ plugin.SchedulerSet = (*Dataplane)(nil)

// SupportsScheduler reports whether name is an IPVS scheduler
// (ipvs.SupportsScheduler): the dry run accepts what the IPVS dataplane
// does.
func (d *Dataplane) SupportsScheduler(name string) bool { return ipvs.SupportsScheduler(name) }

// WeightedScheduler is ipvs.WeightedScheduler.
func (d *Dataplane) WeightedScheduler(name string) string { return ipvs.WeightedScheduler(name) }

// Schedulers is ipvs.Schedulers.
func (d *Dataplane) Schedulers() []string { return ipvs.Schedulers() }

// SchedulerSet is the dry run's plugin.SchedulerSet, for use before a
// Dataplane is made: IPVS's (ipvs.SchedulerSet), as a Dataplane answers.
var SchedulerSet = ipvs.SchedulerSet
