package report

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
)

// ReasonAnnounceFailed is the reason of the Events.
const ReasonAnnounceFailed = "AnnounceFailed"

// DefaultInterval is the least time between two Events for the same
// address and operation.
const DefaultInterval = 10 * time.Minute

// Recorder records a warning Event on a Service.
type Recorder interface {
	Event(svc model.ServiceKey, reason, message string)
}

// Options configure an Announcer.
type Options struct {
	// Recorder receives the Events. Required.
	Recorder Recorder
	// Async is set for an announcer that acts after Announce returns: a
	// nil error from Announce then says nothing of the addresses, and
	// withdrawals end only when Result reports them done.
	Async bool
	// Interval is DefaultInterval when zero.
	Interval time.Duration
	// Now is time.Now when nil.
	Now func() time.Time
}

// Announcer is a plugin.Announcer that reports its per-address failures.
type Announcer struct {
	plugin.Announcer
	opts Options

	mu sync.Mutex
	// services are the Services of each address of the last set.
	services map[netip.Addr][]model.ServiceKey
	// leaving are the Services of addresses withdrawn since, until the
	// withdrawal is known done.
	leaving map[netip.Addr][]model.ServiceKey
	// reported is when each failure was last reported.
	reported map[failure]time.Time
}

type failure struct {
	addr     netip.Addr
	withdraw bool
}

// New wraps a.
func New(a plugin.Announcer, opts Options) *Announcer {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Announcer{
		Announcer: a, opts: opts,
		services: map[netip.Addr][]model.ServiceKey{},
		leaving:  map[netip.Addr][]model.ServiceKey{},
		reported: map[failure]time.Time{},
	}
}

// Announce passes set on and reports the addresses that failed.
func (a *Announcer) Announce(ctx context.Context, set []model.Announcement) error {
	next := map[netip.Addr][]model.ServiceKey{}
	for _, an := range set {
		next[an.Addr] = append(next[an.Addr], an.Service)
	}
	a.mu.Lock()
	for addr, svcs := range a.services {
		if _, kept := next[addr]; !kept {
			a.leaving[addr] = svcs
		}
	}
	for addr := range next {
		delete(a.leaving, addr)
	}
	a.services = next
	a.mu.Unlock()

	err := a.Announcer.Announce(ctx, set)

	failed := map[failure]error{}
	for _, e := range plugin.AddrErrors(err) {
		failed[failure{e.Addr, e.Withdraw}] = e.Err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.opts.Async {
		// A withdrawal not named among the failures is done.
		for addr := range a.leaving {
			if _, f := failed[failure{addr, true}]; !f {
				delete(a.leaving, addr)
			}
		}
	}
	for _, f := range slices.SortedFunc(maps.Keys(failed), compareFailures) {
		a.reportLocked(f, failed[f])
	}
	return err
}

// Result reports the outcome of a background announcement or withdrawal
// of addr (Options.Async).
func (a *Announcer) Result(addr netip.Addr, withdraw bool, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		a.reportLocked(failure{addr, withdraw}, err)
		return
	}
	if withdraw {
		delete(a.leaving, addr)
	}
}

func (a *Announcer) reportLocked(f failure, err error) {
	svcs := a.services[f.addr]
	if f.withdraw {
		svcs = a.leaving[f.addr]
	}
	if len(svcs) == 0 {
		return // no longer anyone's: nobody to tell
	}
	now := a.opts.Now()
	for k, at := range a.reported { // forget what may be reported again
		if now.Sub(at) >= a.opts.Interval {
			delete(a.reported, k)
		}
	}
	if _, recent := a.reported[f]; recent {
		return
	}
	a.reported[f] = now
	op := "announce"
	if f.withdraw {
		op = "withdraw"
	}
	msg := fmt.Sprintf("announcer %s failed to %s %s: %v", a.Name(), op, f.addr, err)
	for _, svc := range svcs {
		a.opts.Recorder.Event(svc, ReasonAnnounceFailed, msg)
	}
}

func compareFailures(x, y failure) int {
	if c := x.addr.Compare(y.addr); c != 0 {
		return c
	}
	switch {
	case x.withdraw == y.withdraw:
		return 0
	case y.withdraw:
		return -1
	}
	return 1
}
