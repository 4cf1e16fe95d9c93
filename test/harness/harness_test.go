package harness

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestPollReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	Poll(t, time.Minute, func() error {
		calls++
		if calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if calls != 3 {
		t.Errorf("f called %d times, want 3", calls)
	}
}

// failRecorder records a Fatalf instead of stopping the test.
type failRecorder struct {
	testing.TB
	msg string
}

func (r *failRecorder) Helper() {}
func (r *failRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	panic(r)
}

// fatalOf runs f with a failRecorder and returns the message f failed
// with through Fatalf, failing the test if f did not.
func fatalOf(t *testing.T, f func(tb testing.TB)) string {
	t.Helper()
	r := &failRecorder{TB: t}
	func() {
		defer func() {
			if p := recover(); p != r {
				t.Fatalf("did not fail through Fatalf (recovered %v)", p)
			}
		}()
		f(r)
	}()
	return r.msg
}

func TestPollFailsWithTheLastError(t *testing.T) {
	msg := fatalOf(t, func(tb testing.TB) {
		n := 0
		Poll(tb, 50*time.Millisecond, func() error { n++; return fmt.Errorf("attempt %d", n) })
	})
	if want := "gave up after 50ms: attempt "; !strings.HasPrefix(msg, want) {
		t.Errorf("Fatalf message = %q, want it to start %q", msg, want)
	}
}

func TestPollStableStartsOverWhenTheConditionFails(t *testing.T) {
	// Holds, fails once (a flap), then holds for good. The window is long
	// against the poll period, so that a loaded machine's late wake-ups
	// between calls 2 and 4 do not fill it early.
	calls := 0
	start := time.Now()
	restarts := PollStable(t, time.Minute, time.Second, func() error {
		calls++
		if calls == 1 || calls == 4 {
			return errors.New("down")
		}
		return nil
	})
	if restarts != 1 {
		t.Errorf("restarts = %d, want 1", restarts)
	}
	if calls < 6 {
		t.Errorf("f called %d times, want the window of 1 s after the failure at call 4 (at least 6 calls)", calls)
	}
	if d := time.Since(start); d < time.Second {
		t.Errorf("returned after %s, before a full window held", d)
	}
	// A condition that never holds for a whole window fails the test.
	msg := fatalOf(t, func(tb testing.TB) {
		PollStable(tb, 50*time.Millisecond, time.Minute, func() error { return nil })
	})
	if want := "gave up after 50ms (started over 0 times): held for "; !strings.HasPrefix(msg, want) {
		t.Errorf("Fatalf message = %q, want it to start %q", msg, want)
	}
}

func TestWatchAbsent(t *testing.T) {
	var mu sync.Mutex
	present := true
	set := func(v bool) { mu.Lock(); present = v; mu.Unlock() }
	absent := WatchAbsent(t, time.Millisecond, map[string]func() bool{
		"always": func() bool { return true },
		"gone": func() bool {
			mu.Lock()
			defer mu.Unlock()
			return present
		},
	})
	time.Sleep(20 * time.Millisecond)
	if got := absent().String(); got != "" {
		t.Errorf("while everything held: %q, want \"\"", got)
	}
	set(false)
	// A loaded machine may not run the watcher for a while: wait until it
	// has counted 20 ms of absence (bounded), rather than for a fixed time.
	Poll(t, time.Minute, Cond("20 ms of absence counted", func() bool { return absent()["gone"] >= 20*time.Millisecond }))
	set(true)
	got := absent().String()
	if !strings.HasPrefix(got, "gone ") || strings.Contains(got, "always") || got == "gone 0 ms" {
		t.Errorf("after a time without \"gone\": %q, want only \"gone N ms\" with N > 0", got)
	}
}

// TestWatchAbsentStallNotCounted: a watcher held up for 200 ms just
// before the one check that failed counts one interval, not the stall.
func TestWatchAbsentStallNotCounted(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	absent := WatchAbsent(t, time.Millisecond, map[string]func() bool{
		"route": func() bool {
			mu.Lock()
			defer mu.Unlock()
			calls++
			switch calls {
			case 2:
				time.Sleep(200 * time.Millisecond) // the machine did not run the watcher
			case 3:
				return false
			}
			return true
		},
	})
	Poll(t, time.Minute, Cond("five checks", func() bool { mu.Lock(); defer mu.Unlock(); return calls >= 5 }))
	got := absent()["route"]
	if got <= 0 || got >= 100*time.Millisecond {
		t.Errorf("absence counted %s, want one interval (more than 0, far less than the 200 ms stall)", got)
	}
}

func TestCondNamesWhatItWaitsFor(t *testing.T) {
	holds := false
	f := Cond("the answer", func() bool { return holds })
	if err := f(); err == nil || err.Error() != "waiting for the answer" {
		t.Errorf("before it holds: %v, want \"waiting for the answer\"", err)
	}
	holds = true
	if err := f(); err != nil {
		t.Errorf("once it holds: %v, want nil", err)
	}
}

func TestBufferIsSafeForConcurrentUse(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				fmt.Fprint(&b, "x")
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	if n := len(b.String()); n != 800 {
		t.Errorf("buffer holds %d bytes, want 800", n)
	}
}

func TestGetAndFreeAddr(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusTeapot)
		fmt.Fprint(w, "short and stout")
	}))
	defer srv.Close()
	code, body, err := Get(srv.URL)
	if err != nil || code != http.StatusTeapot || body != "short and stout" {
		t.Errorf("Get = %d %q %v, want 418 %q", code, body, err, "short and stout")
	}
	addr := FreeAddr(t)
	if _, _, err := Get("http://" + addr + "/"); err == nil {
		t.Errorf("Get of the free address %s answered", addr)
	}
}

func TestList(t *testing.T) {
	var l List[int]
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); l.Add(i) }()
	}
	wg.Wait()
	all := l.All()
	all[0] = 99 // a copy: the list keeps its own
	if got := l.Take(); len(got) != 4 || got[0] == 99 {
		t.Errorf("Take = %v, want the 4 items added", got)
	}
	if got := l.Take(); got != nil {
		t.Errorf("Take after Take = %v, want nil", got)
	}
}
