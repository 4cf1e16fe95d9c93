package wasm

import (
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestLogLimiter(t *testing.T) {
	t0 := time.Unix(1000, 0)
	l := newLogLimiter(2, 3) // 2 lines/s, burst 3
	type step struct {
		at      time.Duration
		ok      bool
		dropped int
	}
	steps := []step{
		{0, true, 0}, {0, true, 0}, {0, true, 0}, // the burst
		{0, false, 0}, {100 * time.Millisecond, false, 0}, // empty; 0.2 token
		{500 * time.Millisecond, true, 2}, // 1 token after 0.5s; reports the 2 dropped
		{500 * time.Millisecond, false, 0},
		{time.Hour, true, 1}, {time.Hour, true, 0}, {time.Hour, true, 0}, {time.Hour, false, 0}, // refilled to burst only
	}
	for i, s := range steps {
		ok, dropped := l.allow(t0.Add(s.at))
		if got := (step{s.at, ok, dropped}); got != s {
			t.Errorf("step %d: allow(+%v) = %v, %d; want %v, %d", i, s.at, ok, dropped, s.ok, s.dropped)
		}
	}
}

func TestLineWriter(t *testing.T) {
	var got []LogRecord
	w := &lineWriter{log: &guestLog{policy: "p", sink: func(r LogRecord) { got = append(got, r) }, limiter: newLogLimiter(1, 100)}, level: slog.LevelWarn}
	w.Write([]byte("pan"))
	w.Write([]byte("ic: x\n\ngoroutine 1\npartial"))
	if first := w.takeFirst(); first != "panic: x" {
		t.Errorf("takeFirst() = %q, want %q", first, "panic: x")
	}
	long := make([]byte, 3000)
	for i := range long {
		long[i] = 'a'
	}
	w.Write(append(long, '\n'))
	want := []LogRecord{
		{Policy: "p", Level: slog.LevelWarn, Message: "panic: x"},
		{Policy: "p", Level: slog.LevelWarn, Message: "goroutine 1"},
		{Policy: "p", Level: slog.LevelWarn, Message: "partial" + string(long[:maxLogLine-len("partial")])},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
}
