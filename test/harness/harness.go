package harness

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// Poll calls f until it returns nil, failing the test with f's last
// error once timeout has passed. Deadlines bound failures only: give
// them minutes, as the machine may be loaded.
func Poll(t testing.TB, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %s: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// PollStable calls f until it has returned nil at every call for window,
// starting the window over whenever f fails (a session that flapped
// while the test set up), and returns how many times it started over
// after f had held. It fails the test with f's last error once timeout
// has passed. A test measures an event only from a state PollStable
// saw hold, and never retries the measured event itself.
func PollStable(t testing.TB, timeout, window time.Duration, f func() error) (restarts int) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var since time.Time // zero: f does not hold now
	var last error
	for {
		now := time.Now()
		if err := f(); err != nil {
			if !since.IsZero() {
				restarts++
			}
			since, last = time.Time{}, err
		} else if last = nil; since.IsZero() {
			since = now
		} else if now.Sub(since) >= window {
			return restarts
		}
		if now.After(deadline) {
			if last == nil {
				last = fmt.Errorf("held for %s, not yet %s", now.Sub(since).Round(time.Millisecond), window)
			}
			t.Fatalf("gave up after %s (started over %d times): %v", timeout, restarts, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Absences says for how long each named condition did not hold.
type Absences map[string]time.Duration

// String is "BIRD 3 ms, FRR 12 ms" (sorted), "" when all always held.
func (a Absences) String() string {
	var out []string
	for name, d := range a {
		out = append(out, fmt.Sprintf("%s %d ms", name, d.Milliseconds()))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// WatchAbsent checks every named condition every interval until the test
// ends, and returns a function that says for how long each did not hold
// so far: a route that must stay installed through a restart, say.
//
// Each time a condition did not hold counts from its first failing check
// to its last, plus one interval: a lower bound, so that a watcher the
// machine did not run for a while (a loaded host) never stretches an
// absence it saw once into one as long as the stall. Any failing check
// counts (at least one interval).
func WatchAbsent(t testing.TB, interval time.Duration, holds map[string]func() bool) func() Absences {
	t.Helper()
	type run struct{ first, last time.Time } // a run of failing checks
	var mu sync.Mutex
	missing := map[string]time.Duration{}
	open := map[string]run{}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(interval):
			}
			for name, ok := range holds {
				held := ok()
				now := time.Now()
				mu.Lock()
				r, failing := open[name]
				switch {
				case !held && failing:
					r.last = now
					open[name] = r
				case !held:
					open[name] = run{first: now, last: now}
				case failing:
					missing[name] += r.last.Sub(r.first) + interval
					delete(open, name)
				}
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return func() Absences {
		mu.Lock()
		defer mu.Unlock()
		out := Absences{}
		for name, d := range missing {
			out[name] = d
		}
		for name, r := range open {
			out[name] += r.last.Sub(r.first) + interval
		}
		return out
	}
}

// Cond adapts a yes-or-no condition to Poll: the function it returns
// fails, naming what it waits for, until cond holds.
func Cond(what string, cond func() bool) func() error {
	return func() error {
		if cond() {
			return nil
		}
		return fmt.Errorf("waiting for %s", what)
	}
}

// Buffer is a bytes.Buffer safe for a writer and a reader at once.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Get returns the status and body of a GET of url, or an error.
func Get(url string) (int, string, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// List is a goroutine-safe list: what a hook called from the code under
// test appends to (Add, as a method value), and the test reads.
type List[T any] struct {
	mu    sync.Mutex
	items []T
}

// Add appends x.
func (l *List[T]) Add(x T) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.items = append(l.items, x)
}

// All returns a copy of the list.
func (l *List[T]) All() []T {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]T(nil), l.items...)
}

// Take returns the list and empties it.
func (l *List[T]) Take() []T {
	l.mu.Lock()
	defer l.mu.Unlock()
	items := l.items
	l.items = nil
	return items
}
