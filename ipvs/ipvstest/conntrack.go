package ipvstest

import (
	"fmt"
	"slices"
	"sync"

	"github.com/switchyard-lb/switchyard/ipvs"
)

// ConntrackDeletion is the entries of one service, or of one of its
// backends, that a DeleteUDP call names.
type ConntrackDeletion = ipvs.UDPFlows

// FakeConntrack records the deletions asked of it, and the passes over
// the table they cost: one per DeleteUDP call. The zero value is ready.
type FakeConntrack struct {
	mu        sync.Mutex
	deletions []ConntrackDeletion
	passes    int
	interrupt int // DeleteUDP calls still to interrupt
}

// Interrupt makes the next n DeleteUDP calls fail as a deletion whose
// table dump was interrupted by concurrent changes: recorded, and an
// error wrapping ipvs.ErrInterrupted.
func (f *FakeConntrack) Interrupt(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.interrupt = n
}

var _ ipvs.Conntrack = (*FakeConntrack)(nil)

func (f *FakeConntrack) DeleteUDP(flows []ipvs.UDPFlows) (uint, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.passes++
	f.deletions = append(f.deletions, flows...)
	if f.interrupt > 0 {
		f.interrupt--
		return 0, fmt.Errorf("ipvstest: delete udp conntrack entries: %w", ipvs.ErrInterrupted)
	}
	return 0, nil
}

// Passes returns how many DeleteUDP calls, each a pass over the whole
// table in the kernel, there were.
func (f *FakeConntrack) Passes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.passes
}

// Deletions returns the services and backends named so far, in order.
func (f *FakeConntrack) Deletions() []ConntrackDeletion {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.deletions)
}
