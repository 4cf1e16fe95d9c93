// Package runnertest provides the project's one fake clock, for every test
// that needs time to move only when it says so: code driven by a
// runner.Runner or taking a runner.Clock (the test can wait until a timer
// has been armed, which is the moment the runner is idle), and code taking
// a func() time.Time (pass the Clock's Now method value).
package runnertest

import (
	"sync"
	"testing"
	"time"

	"github.com/switchyard-lb/switchyard/core/runner"
)

// Clock is a goroutine-safe fake runner.Clock.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*timer
	armed  []time.Time   // deadlines of timers created and not yet waited for
	signal chan struct{} // poked when armed grows
}

var _ runner.Clock = (*Clock)(nil)

// NewClock returns a Clock reading start.
func NewClock(start time.Time) *Clock {
	return &Clock{now: start, signal: make(chan struct{}, 1)}
}

// Now returns the fake time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer returns a timer that fires when the fake time reaches now+d.
func (c *Clock) NewTimer(d time.Duration) runner.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{clock: c, deadline: c.now.Add(d), ch: make(chan time.Time, 1)}
	if d <= 0 {
		t.fired = true
		t.ch <- c.now
	} else {
		c.timers = append(c.timers, t)
	}
	c.armed = append(c.armed, t.deadline)
	select {
	case c.signal <- struct{}{}:
	default:
	}
	return t
}

// Step moves the fake time forward by d and fires the timers that are due.
func (c *Clock) Step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.timers[:0]
	for _, t := range c.timers {
		if t.deadline.After(c.now) {
			kept = append(kept, t)
			continue
		}
		t.fired = true
		t.ch <- c.now
	}
	clear(c.timers[len(kept):])
	c.timers = kept
}

// StepTo moves the fake time forward to at (if it is later) and fires the
// timers that are due.
func (c *Clock) StepTo(at time.Time) {
	c.Step(at.Sub(c.Now()))
}

// WaitTimer waits until a timer that no earlier WaitTimer call returned has
// been created, and returns its deadline. A runner creates a timer only
// when it is about to block until a run is due, so after WaitTimer returns
// the runner runs no more until the test steps the clock, triggers it or
// cancels it. A runner with nothing due (no trigger, no retry and no
// periodic run) blocks without a timer, so WaitTimer cannot see that; the
// test fails if no timer shows up within a minute.
func (c *Clock) WaitTimer(tb testing.TB) time.Time {
	tb.Helper()
	guard := time.NewTimer(time.Minute)
	defer guard.Stop()
	for {
		c.mu.Lock()
		if len(c.armed) > 0 {
			d := c.armed[0]
			c.armed = c.armed[1:]
			c.mu.Unlock()
			return d
		}
		c.mu.Unlock()
		select {
		case <-c.signal:
		case <-guard.C:
			tb.Fatal("runnertest: no timer was armed within a minute")
		}
	}
}

type timer struct {
	clock    *Clock
	deadline time.Time
	ch       chan time.Time
	fired    bool
}

func (t *timer) C() <-chan time.Time { return t.ch }

// Stop removes the timer; it reports whether the timer had not fired yet.
func (t *timer) Stop() bool {
	c := t.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.fired {
		return false
	}
	for i, o := range c.timers {
		if o == t {
			c.timers = append(c.timers[:i], c.timers[i+1:]...)
			return true
		}
	}
	return false
}
