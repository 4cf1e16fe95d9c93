package ipvstest

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/ipvs"
)

// FakeFirewall is a table that records the specs it was asked to program
// and, like the nftables table, keeps the last one's stamp and owned keys
// (as RecordOwned changes them) for Load. Like ipvs.NFTables it counts
// a generation that every change, Tamper's too, moves, for Untouched;
// a test's own Load counts as the Firewall's. The zero value is ready
// and holds no table.
type FakeFirewall struct {
	mu     sync.Mutex
	specs  []ipvs.FirewallSpec
	table  *ipvs.FirewallSpec
	stamp  string // the table's
	writes int
	loads  int
	err    error
	// gen counts changes; seen is gen after the last write or Load,
	// which left the table as known when known is set.
	gen, seen int
	known     bool
}

var _ ipvs.UntouchedFirewall = (*FakeFirewall)(nil)

// Untouched reports whether nothing changed the table since the last
// successful write or Load, which left it as known.
func (f *FakeFirewall) Untouched() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err == nil && f.known && f.seen == f.gen
}

// changed counts a write that succeeded: the table is as known after it
// when it was (whole) or the write rewrote it whole.
func (f *FakeFirewall) changed(whole bool) {
	f.known = whole || (f.known && f.seen == f.gen)
	f.gen++
	f.seen = f.gen
	f.writes++
}

// Loads returns the number of successful Loads.
func (f *FakeFirewall) Loads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.loads
}

// SetError makes later Syncs and Loads fail with err (nil clears it).
func (f *FakeFirewall) SetError(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

func (f *FakeFirewall) Sync(spec ipvs.FirewallSpec) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		f.known = false
		return f.err
	}
	f.specs = append(f.specs, spec)
	spec.Owned = slices.Clone(spec.Owned)
	spec.Internal = slices.Clone(spec.Internal)
	f.table = &spec
	f.stamp = spec.Stamp()
	f.changed(true)
	return nil
}

// RecordOwned changes the table's owned keys as nftables would: it fails
// without a table, or when a key to drop is missing, and changes nothing
// then.
func (f *FakeFirewall) RecordOwned(add, drop []model.VirtualServiceKey) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		f.known = false
		return f.err
	}
	if len(add) == 0 && len(drop) == 0 {
		return nil
	}
	if f.table == nil {
		f.known = false
		return fmt.Errorf("ipvstest: record owned services: table: %w", ipvs.ErrNotFound)
	}
	owned := map[model.VirtualServiceKey]bool{}
	for _, k := range f.table.Owned {
		owned[k] = true
	}
	for _, k := range drop {
		if !owned[k] {
			f.known = false
			return fmt.Errorf("ipvstest: record owned services: drop %v: %w", k, ipvs.ErrNotFound)
		}
		delete(owned, k)
	}
	for _, k := range add {
		owned[k] = true
	}
	f.table.Owned = slices.SortedFunc(maps.Keys(owned), model.VirtualServiceKey.Compare)
	f.changed(false)
	return nil
}

// Writes returns the number of transactions the table took: successful
// Syncs, and successful RecordOwneds with keys to add or drop.
func (f *FakeFirewall) Writes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writes
}

func (f *FakeFirewall) Load() (ipvs.FirewallState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		f.known = false
		return ipvs.FirewallState{}, f.err
	}
	f.loads++
	f.seen, f.known = f.gen, true
	if f.table == nil {
		return ipvs.FirewallState{}, nil
	}
	t := f.table
	return ipvs.FirewallState{Stamp: f.stamp, Owned: slices.Clone(t.Owned), Internal: slices.Clone(t.Internal),
		Content: ipvs.FirewallSpec{ClusterIPs: slices.Clone(t.ClusterIPs), ExternalIPs: slices.Clone(t.ExternalIPs),
			NodePorts: slices.Clone(t.NodePorts), Endpoints: slices.Clone(t.Endpoints)}}, nil
}

// Update applies the delta as nftables would: it fails without a table,
// or when the table's stamp is not delta.From, and changes nothing then.
func (f *FakeFirewall) Update(delta ipvs.FirewallDelta) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		f.known = false
		return f.err
	}
	if f.table == nil || f.stamp != delta.From {
		f.known = false
		return fmt.Errorf("ipvstest: update the table: not at stamp %q: %w", delta.From, ipvs.ErrNotFound)
	}
	t := *f.table
	t.ClusterIPs = apply(t.ClusterIPs, delta.Add.ClusterIPs, delta.Remove.ClusterIPs, netip.Addr.Compare)
	t.ExternalIPs = apply(t.ExternalIPs, delta.Add.ExternalIPs, delta.Remove.ExternalIPs, netip.Addr.Compare)
	t.NodePorts = apply(t.NodePorts, delta.Add.NodePorts, delta.Remove.NodePorts, model.VirtualServiceKey.Compare)
	t.Endpoints = apply(t.Endpoints, delta.Add.Endpoints, delta.Remove.Endpoints, netip.Addr.Compare)
	t.Internal = apply(t.Internal, delta.Add.Internal, delta.Remove.Internal, func(a, b ipvs.InternalMark) int {
		if c := a.Key.Compare(b.Key); c != 0 {
			return c
		}
		return cmp.Compare(a.Mark, b.Mark)
	})
	f.table = &t
	f.stamp = delta.To
	f.specs = append(f.specs, t)
	f.changed(false)
	return nil
}

// apply returns the sorted elements of have without remove and with add.
func apply[T comparable](have, add, remove []T, compare func(T, T) int) []T {
	out := slices.DeleteFunc(slices.Clone(have), func(x T) bool { return slices.Contains(remove, x) })
	out = append(out, add...)
	slices.SortFunc(out, compare)
	return slices.Compact(out)
}

// Tamper changes the table behind the dataplane's back, as an
// administrator's `nft delete element` would: its stamp stays.
func (f *FakeFirewall) Tamper(change func(*ipvs.FirewallSpec)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := *f.table
	change(&t)
	f.table = &t
	f.gen++
}

// DeleteTable drops the table, as an administrator's `nft delete table`
// would.
func (f *FakeFirewall) DeleteTable() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.table = nil
	f.gen++
}

// Specs returns the programmed specs, oldest first.
func (f *FakeFirewall) Specs() []ipvs.FirewallSpec {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.specs)
}
