package wasm

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/tetratelabs/wazero/api"
)

// LogRecord is one line a guest logged, through sy_v1.log or its stdout
// or stderr.
type LogRecord struct {
	Policy  string
	Level   slog.Level
	Message string
	// Dropped counts the policy's lines dropped by the rate limit since
	// the previous record passed.
	Dropped int
}

// maxLogLine is the longest guest log line passed on; longer ones are
// truncated.
const maxLogLine = 1024

// logLimiter is a token bucket: rate lines per second, up to burst at
// once.
type logLimiter struct {
	mu      sync.Mutex
	rate    float64
	burst   float64
	tokens  float64
	last    time.Time
	dropped int
}

func newLogLimiter(rate float64, burst int) *logLimiter {
	return &logLimiter{rate: rate, burst: float64(burst), tokens: float64(burst)}
}

// allow reports whether a line at now may pass and, if so, how many were
// dropped before it.
func (l *logLimiter) allow(now time.Time) (ok bool, dropped int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() {
		l.tokens = min(l.burst, l.tokens+now.Sub(l.last).Seconds()*l.rate)
	}
	l.last = now
	if l.tokens < 1 {
		l.dropped++
		return false, 0
	}
	l.tokens--
	dropped, l.dropped = l.dropped, 0
	return true, dropped
}

// guestLog routes one policy's guest lines to the configured callback.
type guestLog struct {
	policy  string
	sink    func(LogRecord)
	limiter *logLimiter
}

func (g *guestLog) emit(level slog.Level, msg []byte) {
	if g.sink == nil {
		return
	}
	ok, dropped := g.limiter.allow(time.Now())
	if !ok {
		return
	}
	if len(msg) > maxLogLine {
		msg = msg[:maxLogLine]
	}
	g.sink(LogRecord{Policy: g.policy, Level: level, Message: string(msg), Dropped: dropped})
}

func guestLevel(l uint32) slog.Level {
	switch int32(l) {
	case 0:
		return slog.LevelDebug
	case 1:
		return slog.LevelInfo
	case 2:
		return slog.LevelWarn
	}
	if int32(l) < 0 {
		return slog.LevelDebug
	}
	return slog.LevelError
}

type guestLogKey struct{}

// callLog is what a guest call logs through: the policy's log, and the
// last warning or error of the call, kept for the error a decline
// returns. Only the goroutine holding the instance touches it.
type callLog struct {
	log  *guestLog
	last string
}

// hostLog implements sy_v1.log(level, ptr, len). A range outside guest
// memory is ignored rather than trapping.
func hostLog(ctx context.Context, mod api.Module, stack []uint64) {
	c, _ := ctx.Value(guestLogKey{}).(*callLog)
	if c == nil {
		return
	}
	level, ptr, n := api.DecodeU32(stack[0]), api.DecodeU32(stack[1]), api.DecodeU32(stack[2])
	n = min(n, maxLogLine)
	msg, ok := mod.Memory().Read(ptr, n)
	if !ok {
		return
	}
	msg = bytes.TrimRight(msg, "\n")
	l := guestLevel(level)
	if l >= slog.LevelWarn {
		c.last = string(msg)
	}
	c.log.emit(l, msg)
}

// lineWriter turns a guest's stdout or stderr into log lines, and keeps
// the first line written since reset for error messages.
type lineWriter struct {
	log   *guestLog
	level slog.Level
	mu    sync.Mutex
	buf   []byte
	first string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			room := maxLogLine - len(w.buf)
			w.buf = append(w.buf, p[:min(len(p), max(room, 0))]...)
			break
		}
		w.buf = append(w.buf, p[:min(i, max(maxLogLine-len(w.buf), 0))]...)
		w.line()
		p = p[i+1:]
	}
	return n, nil
}

func (w *lineWriter) line() {
	if len(w.buf) > 0 {
		if w.first == "" {
			w.first = string(w.buf)
		}
		w.log.emit(w.level, w.buf)
	}
	w.buf = w.buf[:0]
}

// takeFirst returns the first complete or partial line written since the
// previous call, and forgets it.
func (w *lineWriter) takeFirst() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.first == "" && len(w.buf) > 0 {
		w.line()
	}
	f := w.first
	w.first = ""
	return f
}
