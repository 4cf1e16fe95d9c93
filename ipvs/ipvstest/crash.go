package ipvstest

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/ipvs"
)

// The Addresses and Firewall methods, for Crash.After (the Kernel methods
// are the Op constants of Fake).
const (
	OpEnsureDummy    Op = "EnsureDummy"
	OpAddrs          Op = "Addrs"
	OpAddAddr        Op = "AddAddr"
	OpDelAddr        Op = "DelAddr"
	OpFirewallSync   Op = "Firewall.Sync"
	OpFirewallUpdate Op = "Firewall.Update"
	OpFirewallLoad   Op = "Firewall.Load"
	OpRecordOwned    Op = "Firewall.RecordOwned"
)

// ErrCrashed is what every call through a crashed Crash fails with.
var ErrCrashed = errors.New("process crashed")

// Crash simulates the process dying at a chosen call. The Kernel,
// Addresses and Firewall it wraps pass calls through until the armed call
// returns, then fail every later call with ErrCrashed without reaching
// what they wrap, whose state stays as the crash left it: a Dataplane
// built on the same fakes (or the same kernel) after Restart is the
// restarted daemon. It wraps fakes and the real kernel alike, and is safe
// for concurrent use. The zero value is armed for nothing and running.
type Crash struct {
	mu   sync.Mutex
	op   Op  // the armed call; "" for none
	left int // calls of op to let through, the last included
	down bool
}

// After arms c: the process dies right after the n-th call of op from now
// returns, whatever its result (n < 1 counts as 1).
func (c *Crash) After(op Op, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.op, c.left = op, max(n, 1)
}

// Crashed reports whether the armed call happened.
func (c *Crash) Crashed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.down
}

// Restart disarms c and lets calls through again.
func (c *Crash) Restart() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.op, c.left, c.down = "", 0, false
}

// enter admits a call of op, or fails it when the process is down. The
// armed call itself is admitted: the crash follows it.
func (c *Crash) enter(op Op) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down {
		return fmt.Errorf("ipvstest: %s: %w", op, ErrCrashed)
	}
	if c.op != "" && op == c.op {
		c.left--
		if c.left == 0 {
			c.down = true
		}
	}
	return nil
}

// Kernel wraps k.
func (c *Crash) Kernel(k ipvs.Kernel) ipvs.Kernel { return crashKernel{c, k} }

// Addresses wraps a.
func (c *Crash) Addresses(a ipvs.Addresses) ipvs.Addresses { return crashAddresses{c, a} }

// Firewall wraps f.
func (c *Crash) Firewall(f ipvs.Firewall) ipvs.Firewall { return crashFirewall{c, f} }

type crashKernel struct {
	c *Crash
	k ipvs.Kernel
}

func (k crashKernel) Services() ([]ipvs.Service, error) {
	if err := k.c.enter(OpServices); err != nil {
		return nil, err
	}
	return k.k.Services()
}

func (k crashKernel) Service(key model.VirtualServiceKey) (ipvs.Service, error) {
	if err := k.c.enter(OpService); err != nil {
		return ipvs.Service{}, err
	}
	return k.k.Service(key)
}

func (k crashKernel) AddService(s ipvs.Service) error {
	if err := k.c.enter(OpAddService); err != nil {
		return err
	}
	return k.k.AddService(s)
}

func (k crashKernel) UpdateService(s ipvs.Service) error {
	if err := k.c.enter(OpUpdateService); err != nil {
		return err
	}
	return k.k.UpdateService(s)
}

func (k crashKernel) DeleteService(key model.VirtualServiceKey) error {
	if err := k.c.enter(OpDeleteService); err != nil {
		return err
	}
	return k.k.DeleteService(key)
}

func (k crashKernel) Destinations(key model.VirtualServiceKey) ([]ipvs.DestinationState, error) {
	if err := k.c.enter(OpDestinations); err != nil {
		return nil, err
	}
	return k.k.Destinations(key)
}

func (k crashKernel) AddDestination(key model.VirtualServiceKey, d ipvs.Destination) error {
	if err := k.c.enter(OpAddDestination); err != nil {
		return err
	}
	return k.k.AddDestination(key, d)
}

func (k crashKernel) UpdateDestination(key model.VirtualServiceKey, d ipvs.Destination) error {
	if err := k.c.enter(OpUpdateDestination); err != nil {
		return err
	}
	return k.k.UpdateDestination(key, d)
}

func (k crashKernel) DeleteDestination(key model.VirtualServiceKey, d ipvs.DestinationKey) error {
	if err := k.c.enter(OpDeleteDestination); err != nil {
		return err
	}
	return k.k.DeleteDestination(key, d)
}

func (k crashKernel) Timeouts() (ipvs.Timeouts, error) {
	if err := k.c.enter(OpTimeouts); err != nil {
		return ipvs.Timeouts{}, err
	}
	return k.k.Timeouts()
}

func (k crashKernel) SetTimeouts(t ipvs.Timeouts) error {
	if err := k.c.enter(OpSetTimeouts); err != nil {
		return err
	}
	return k.k.SetTimeouts(t)
}

type crashAddresses struct {
	c *Crash
	a ipvs.Addresses
}

func (a crashAddresses) EnsureDummy(name string) error {
	if err := a.c.enter(OpEnsureDummy); err != nil {
		return err
	}
	return a.a.EnsureDummy(name)
}

func (a crashAddresses) Addrs(name string) ([]netip.Addr, error) {
	if err := a.c.enter(OpAddrs); err != nil {
		return nil, err
	}
	return a.a.Addrs(name)
}

func (a crashAddresses) AddAddr(name string, addr netip.Addr) error {
	if err := a.c.enter(OpAddAddr); err != nil {
		return err
	}
	return a.a.AddAddr(name, addr)
}

func (a crashAddresses) DelAddr(name string, addr netip.Addr) error {
	if err := a.c.enter(OpDelAddr); err != nil {
		return err
	}
	return a.a.DelAddr(name, addr)
}

type crashFirewall struct {
	c *Crash
	f ipvs.Firewall
}

func (f crashFirewall) Sync(spec ipvs.FirewallSpec) error {
	if err := f.c.enter(OpFirewallSync); err != nil {
		return err
	}
	return f.f.Sync(spec)
}

func (f crashFirewall) Update(delta ipvs.FirewallDelta) error {
	if err := f.c.enter(OpFirewallUpdate); err != nil {
		return err
	}
	return f.f.Update(delta)
}

func (f crashFirewall) Load() (ipvs.FirewallState, error) {
	if err := f.c.enter(OpFirewallLoad); err != nil {
		return ipvs.FirewallState{}, err
	}
	return f.f.Load()
}

func (f crashFirewall) RecordOwned(add, drop []model.VirtualServiceKey) error {
	if err := f.c.enter(OpRecordOwned); err != nil {
		return err
	}
	return f.f.RecordOwned(add, drop)
}
