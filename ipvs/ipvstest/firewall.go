package ipvstest

import (
	"slices"
	"sync"

	"github.com/switchyard-lb/switchyard/ipvs"
)

// FakeFirewall is a table that records the specs it was asked to program
// and, like the nftables table, keeps the last one's stamp and owned keys
// for Load. The zero value is ready and holds no table.
type FakeFirewall struct {
	mu    sync.Mutex
	specs []ipvs.FirewallSpec
	table *ipvs.FirewallSpec
	err   error
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
	f.table = &spec
	return nil
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
	return ipvs.FirewallState{Stamp: f.table.Stamp(), Owned: slices.Clone(f.table.Owned)}, nil
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
