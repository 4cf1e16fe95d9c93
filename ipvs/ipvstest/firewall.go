package ipvstest

import (
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/ipvs"
)

// FakeFirewall is a table that records the specs it was asked to program
// and, like the nftables table, keeps the last one's stamp and owned keys
// (as RecordOwned changes them) for Load. The zero value is ready and
// holds no table.
type FakeFirewall struct {
	mu     sync.Mutex
	specs  []ipvs.FirewallSpec
	table  *ipvs.FirewallSpec
	writes int
	err    error
}

var _ ipvs.Firewall = (*FakeFirewall)(nil)

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
		return f.err
	}
	f.specs = append(f.specs, spec)
	spec.Owned = slices.Clone(spec.Owned)
	spec.Internal = slices.Clone(spec.Internal)
	f.table = &spec
	f.writes++
	return nil
}

// RecordOwned changes the table's owned keys as nftables would: it fails
// without a table, or when a key to drop is missing, and changes nothing
// then.
func (f *FakeFirewall) RecordOwned(add, drop []model.VirtualServiceKey) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	if len(add) == 0 && len(drop) == 0 {
		return nil
	}
	if f.table == nil {
		return fmt.Errorf("ipvstest: record owned services: table: %w", ipvs.ErrNotFound)
	}
	owned := map[model.VirtualServiceKey]bool{}
	for _, k := range f.table.Owned {
		owned[k] = true
	}
	for _, k := range drop {
		if !owned[k] {
			return fmt.Errorf("ipvstest: record owned services: drop %v: %w", k, ipvs.ErrNotFound)
		}
		delete(owned, k)
	}
	for _, k := range add {
		owned[k] = true
	}
	f.table.Owned = slices.SortedFunc(maps.Keys(owned), model.VirtualServiceKey.Compare)
	f.writes++
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
		return ipvs.FirewallState{}, f.err
	}
	if f.table == nil {
		return ipvs.FirewallState{}, nil
	}
	return ipvs.FirewallState{Stamp: f.table.Stamp(), Owned: slices.Clone(f.table.Owned), Internal: slices.Clone(f.table.Internal)}, nil
}

// DeleteTable drops the table, as an administrator's `nft delete table`
// would.
func (f *FakeFirewall) DeleteTable() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.table = nil
}

// Specs returns the programmed specs, oldest first.
func (f *FakeFirewall) Specs() []ipvs.FirewallSpec {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.specs)
}
