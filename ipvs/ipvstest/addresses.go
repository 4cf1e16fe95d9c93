package ipvstest

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"github.com/switchyard-lb/switchyard/ipvs"
)

// FakeAddresses is an in-memory ipvs.Addresses: links by name, each with a
// type and its addresses. The zero value has no links and is ready.
type FakeAddresses struct {
	mu        sync.Mutex
	links     map[string]*fakeLink
	interrupt int // Addrs calls still to interrupt
	batches   int // AddAddrs and DelAddrs calls
}

type fakeLink struct {
	typ   string
	addrs []netip.Addr // sorted
}

var (
	_ ipvs.Addresses      = (*FakeAddresses)(nil)
	_ ipvs.AddressBatcher = (*FakeAddresses)(nil)
)

// AddAddrs binds addrs one after the other with AddAddr: one batch.
func (f *FakeAddresses) AddAddrs(name string, addrs []netip.Addr) []error {
	return f.batch(name, addrs, f.AddAddr)
}

// DelAddrs unbinds addrs one after the other with DelAddr: one batch.
func (f *FakeAddresses) DelAddrs(name string, addrs []netip.Addr) []error {
	return f.batch(name, addrs, f.DelAddr)
}

func (f *FakeAddresses) batch(name string, addrs []netip.Addr, op func(string, netip.Addr) error) []error {
	f.mu.Lock()
	f.batches++
	f.mu.Unlock()
	errs := make([]error, len(addrs))
	for i, a := range addrs {
		errs[i] = op(name, a)
	}
	return errs
}

// Batches returns how many AddAddrs and DelAddrs calls (round trips) were
// made.
func (f *FakeAddresses) Batches() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.batches
}

// NewFakeAddresses returns a fake with no links.
func NewFakeAddresses() *FakeAddresses { return &FakeAddresses{} }

// AddLink adds a link of the given type ("dummy", "device", "veth"...),
// as something else on the host would.
func (f *FakeAddresses) AddLink(name, typ string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.links == nil {
		f.links = map[string]*fakeLink{}
	}
	if _, ok := f.links[name]; !ok {
		f.links[name] = &fakeLink{typ: typ}
	}
}

// Interrupt makes the next n Addrs calls return what a dump interrupted
// by concurrent changes returns: the first half of the addresses and an
// error wrapping ipvs.ErrInterrupted.
func (f *FakeAddresses) Interrupt(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.interrupt = n
}

func (f *FakeAddresses) EnsureDummy(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l, ok := f.links[name]; ok {
		if l.typ != "dummy" {
			return fmt.Errorf("ipvstest: link %s exists and is a %s link, not dummy", name, l.typ)
		}
		return nil
	}
	if f.links == nil {
		f.links = map[string]*fakeLink{}
	}
	f.links[name] = &fakeLink{typ: "dummy"}
	return nil
}

func (f *FakeAddresses) Addrs(name string) ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.links[name]
	if !ok {
		return nil, fmt.Errorf("ipvstest: list addresses: link %s: %w", name, ipvs.ErrNotFound)
	}
	if f.interrupt > 0 {
		f.interrupt--
		return slices.Clone(l.addrs[:len(l.addrs)/2]), fmt.Errorf("ipvstest: list addresses of %s: %w", name, ipvs.ErrInterrupted)
	}
	return slices.Clone(l.addrs), nil
}

func (f *FakeAddresses) AddAddr(name string, a netip.Addr) error {
	l, err := f.lookup("bind", name, a)
	if err != nil {
		return err
	}
	defer f.mu.Unlock()
	i, found := slices.BinarySearchFunc(l.addrs, a, netip.Addr.Compare)
	if found {
		return fmt.Errorf("ipvstest: bind %s on %s: %w", a, name, ipvs.ErrExists)
	}
	l.addrs = slices.Insert(l.addrs, i, a)
	return nil
}

func (f *FakeAddresses) DelAddr(name string, a netip.Addr) error {
	l, err := f.lookup("unbind", name, a)
	if err != nil {
		return err
	}
	defer f.mu.Unlock()
	i, found := slices.BinarySearchFunc(l.addrs, a, netip.Addr.Compare)
	if !found {
		return fmt.Errorf("ipvstest: unbind %s on %s: %w", a, name, ipvs.ErrNotFound)
	}
	l.addrs = slices.Delete(l.addrs, i, i+1)
	return nil
}

// lookup validates a and finds the link. On success it returns with f
// locked; the caller unlocks.
func (f *FakeAddresses) lookup(op, name string, a netip.Addr) (*fakeLink, error) {
	if !a.IsValid() || a.Is4In6() {
		return nil, fmt.Errorf("ipvstest: %s address %v: want an IPv4 or IPv6 address", op, a)
	}
	f.mu.Lock()
	l, ok := f.links[name]
	if !ok {
		f.mu.Unlock()
		return nil, fmt.Errorf("ipvstest: %s %s: link %s: %w", op, a, name, ipvs.ErrNotFound)
	}
	return l, nil
}
