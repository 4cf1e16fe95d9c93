package plugintest

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
)

// Announcer is a goroutine-safe plugin.Announcer that records the sets it
// is given. A call that fails (see FailNext) is recorded but does not
// change Current.
type Announcer struct {
	name string

	mu       sync.Mutex
	calls    [][]model.Announcement
	current  []model.Announcement
	failNext []error
	closed   bool
	// OnAnnounce, when set, is called (without the lock) with every set
	// before it is recorded; tests use it to check invariants at the
	// moment of the call.
	onAnnounce func(set []model.Announcement)
}

var _ plugin.Announcer = (*Announcer)(nil)

// NewAnnouncer returns an Announcer named name.
func NewAnnouncer(name string) *Announcer { return &Announcer{name: name} }

// Name returns the name given to NewAnnouncer.
func (a *Announcer) Name() string { return a.name }

// OnAnnounce sets a function called with every set Announce receives.
func (a *Announcer) OnAnnounce(f func(set []model.Announcement)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.onAnnounce = f
}

// FailNext makes the next len(errs) calls return these errors, as they
// are, in turn.
func (a *Announcer) FailNext(errs ...error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.failNext = append(a.failNext, errs...)
}

// Announce records set.
func (a *Announcer) Announce(ctx context.Context, set []model.Announcement) error {
	a.mu.Lock()
	hook := a.onAnnounce
	a.mu.Unlock()
	if hook != nil {
		hook(slices.Clone(set))
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return fmt.Errorf("%s: announce after close", a.name)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: announce: %w", a.name, err)
	}
	a.calls = append(a.calls, slices.Clone(set))
	if len(a.failNext) > 0 {
		err := a.failNext[0]
		a.failNext = a.failNext[1:]
		return err
	}
	a.current = slices.Clone(set)
	return nil
}

// Current returns the set of the last successful call.
func (a *Announcer) Current() []model.Announcement {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.current)
}

// Calls returns every set received, failed calls included, in order.
func (a *Announcer) Calls() [][]model.Announcement {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([][]model.Announcement, len(a.calls))
	for i, c := range a.calls {
		out[i] = slices.Clone(c)
	}
	return out
}

// Close makes later calls fail; Current keeps the last set.
func (a *Announcer) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	return nil
}
