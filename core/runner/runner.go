package runner

import (
	"context"
	"time"
)

// Clock is the time source a Runner waits on.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer, as time.Timer.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
}

// Option configures a Runner.
type Option func(*Runner)

// WithClock makes the Runner read and wait on c instead of the real clock.
func WithClock(c Clock) Option {
	return func(r *Runner) { r.clock = c }
}

// WithBurst lets up to n runs start back to back after a quiet time, as
// kube-proxy's runner does (its burstSyncs is 2): minInterval then bounds
// the average rate, a token bucket of n runs refilled once per
// minInterval, so that a change arriving just after an unrelated run
// (a statistics tick) does not wait for minInterval. n below 1 is 1, the
// default: one run per minInterval.
func WithBurst(n int) Option {
	return func(r *Runner) { r.burst = max(n, 1) }
}

// Runner runs a function with bounded frequency. Its zero value is not
// usable; create one with New.
type Runner struct {
	name          string
	fn            func(context.Context) error
	minInterval   time.Duration
	maxInterval   time.Duration
	retryInterval time.Duration
	clock         Clock
	trigger       chan struct{}
	burst         int
	// creditLeft is what the bucket held at creditAt (see credit).
	creditLeft time.Duration
	creditAt   time.Time
}

// New returns a Runner that calls fn:
//   - at most once per minInterval, measured between the starts of runs,
//     however often Trigger is called (on average, with WithBurst);
//   - at least once per maxInterval without triggers (0 disables the
//     periodic run);
//   - retryInterval after a run that returned an error, unless a trigger
//     runs it sooner (but never sooner than minInterval allows).
//
// Run calls fn once as soon as it starts.
func New(name string, fn func(context.Context) error, minInterval, maxInterval, retryInterval time.Duration, opts ...Option) *Runner {
	r := &Runner{
		name:          name,
		fn:            fn,
		minInterval:   max(minInterval, 0),
		maxInterval:   max(maxInterval, 0),
		retryInterval: max(retryInterval, 0),
		clock:         SystemClock,
		trigger:       make(chan struct{}, 1),
		burst:         1,
	}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Name returns the name the Runner was created with.
func (r *Runner) Name() string { return r.name }

// Trigger asks for a run as soon as minInterval allows. It never blocks,
// and triggers that arrive before that run coalesce into it. A trigger
// during a run causes one more run after it.
func (r *Runner) Trigger() {
	select {
	case r.trigger <- struct{}{}:
	default:
	}
}

// Run calls fn as New describes until ctx is done; it blocks. ctx is passed
// to fn, so cancelling it also interrupts a run in progress.
func (r *Runner) Run(ctx context.Context) {
	var (
		lastRun time.Time // start of the last run; zero before the first
		pending = true    // a run was asked for (the first one by Run itself)
		retryAt time.Time // zero unless the last run failed
	)
	for ctx.Err() == nil {
		now := r.clock.Now()
		due, ok := r.due(now, lastRun, pending, retryAt)
		if ok && !due.After(now) {
			// This run covers every trigger received so far.
			select {
			case <-r.trigger:
			default:
			}
			pending = false
			lastRun = now
			r.take(now)
			err := r.fn(ctx)
			retryAt = time.Time{}
			if err != nil {
				retryAt = r.clock.Now().Add(r.retryInterval)
			}
			continue
		}
		var timerC <-chan time.Time
		var timer Timer
		if ok {
			timer = r.clock.NewTimer(due.Sub(now))
			timerC = timer.C()
		}
		select {
		case <-ctx.Done():
		case <-r.trigger:
			pending = true
		case <-timerC:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// due returns when the next run should start, and false when nothing
// calls for one (no trigger, no retry and no periodic run).
func (r *Runner) due(now, lastRun time.Time, pending bool, retryAt time.Time) (time.Time, bool) {
	if lastRun.IsZero() {
		return time.Time{}, true // the first run is immediate
	}
	earliest := r.nextToken(now)
	var due time.Time
	ok := false
	consider := func(t time.Time) {
		if !ok || t.Before(due) {
			due, ok = t, true
		}
	}
	if pending {
		consider(earliest)
	}
	if !retryAt.IsZero() {
		consider(retryAt)
	}
	if r.maxInterval > 0 {
		consider(lastRun.Add(r.maxInterval))
	}
	if ok && due.Before(earliest) {
		due = earliest
	}
	return due, ok
}

// credit returns what the bucket holds at now, in time: a run costs
// minInterval of it.
func (r *Runner) credit(now time.Time) time.Duration {
	full := time.Duration(r.burst) * r.minInterval
	if r.creditAt.IsZero() {
		return full
	}
	return min(full, r.creditLeft+now.Sub(r.creditAt))
}

// take spends one run of the bucket at now.
func (r *Runner) take(now time.Time) {
	r.creditLeft, r.creditAt = max(r.credit(now)-r.minInterval, 0), now
}

// nextToken returns when the bucket next holds a run: now, or later.
func (r *Runner) nextToken(now time.Time) time.Time {
	if c := r.credit(now); c < r.minInterval {
		return now.Add(r.minInterval - c)
	}
	return now
}

// SystemClock is the real clock, the default of every Clock option.
var SystemClock Clock = realClock{}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time { return t.t.C }
func (t realTimer) Stop() bool          { return t.t.Stop() }
