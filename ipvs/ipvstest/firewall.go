package ipvstest

import (
	"slices"
	"sync"

	"github.com/switchyard-lb/switchyard/ipvs"
)

// FakeFirewall records the specs it was asked to program. The zero value
// is ready.
type FakeFirewall struct {
	mu    sync.Mutex
	specs []ipvs.FirewallSpec
	err   error
}

var _ ipvs.Firewall = (*FakeFirewall)(nil)

// SetError makes later Syncs fail with err (nil clears it).
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
	return nil
}

// Specs returns the programmed specs, oldest first.
func (f *FakeFirewall) Specs() []ipvs.FirewallSpec {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.specs)
}
