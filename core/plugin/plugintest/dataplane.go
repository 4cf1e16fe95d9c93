package plugintest

import (
	"context"
	"sync"

	"github.com/switchyard-lb/switchyard/core/plugin"
)

// Dataplane wraps a real plugin.Dataplane (for example the dry-run one)
// and fails the Applies a test asks it to fail, without passing them on:
// a failed Apply changes nothing. It is goroutine-safe if the wrapped
// dataplane is.
type Dataplane struct {
	plugin.Dataplane

	mu       sync.Mutex
	failNext []error
	after    func(plugin.Update)
	failed   int
}

var _ plugin.Dataplane = (*Dataplane)(nil)

// WrapDataplane returns d wrapped.
func WrapDataplane(d plugin.Dataplane) *Dataplane { return &Dataplane{Dataplane: d} }

// FailNext makes the next len(errs) Applies return these errors, as they
// are, in turn.
func (d *Dataplane) FailNext(errs ...error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failNext = append(d.failNext, errs...)
}

// AfterApply sets a function called after every successful Apply, for
// tests that check invariants at that moment.
func (d *Dataplane) AfterApply(f func(plugin.Update)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.after = f
}

// Failed returns how many Applies failed on request.
func (d *Dataplane) Failed() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.failed
}

// Apply fails as asked, or passes u on.
func (d *Dataplane) Apply(ctx context.Context, u plugin.Update) error {
	d.mu.Lock()
	var err error
	if len(d.failNext) > 0 {
		err, d.failNext = d.failNext[0], d.failNext[1:]
		d.failed++
	}
	after := d.after
	d.mu.Unlock()
	if err != nil {
		return err
	}
	if err := d.Dataplane.Apply(ctx, u); err != nil {
		return err
	}
	if after != nil {
		after(u)
	}
	return nil
}
