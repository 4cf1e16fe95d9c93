package ipvstest

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"github.com/switchyard-lb/switchyard/ipvs"
)

// ConntrackDeletion is one DeleteUDP call.
type ConntrackDeletion struct {
	VIP     netip.Addr
	Port    uint16
	Backend netip.Addr // invalid: every backend
}

// FakeConntrack records the deletions asked of it. The zero value is
// ready.
type FakeConntrack struct {
	mu        sync.Mutex
	deletions []ConntrackDeletion
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

func (f *FakeConntrack) DeleteUDP(vip netip.Addr, port uint16, backend netip.Addr) (uint, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deletions = append(f.deletions, ConntrackDeletion{VIP: vip, Port: port, Backend: backend})
	if f.interrupt > 0 {
		f.interrupt--
		return 0, fmt.Errorf("ipvstest: delete udp conntrack entries: %w", ipvs.ErrInterrupted)
	}
	return 0, nil
}

// Deletions returns the calls so far, in order.
func (f *FakeConntrack) Deletions() []ConntrackDeletion {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.deletions)
}
