package bgp

import (
	"context"
	"log/slog"
	"sort"

	gobgplog "github.com/osrg/gobgp/v3/pkg/log"
)

// slogAdapter lets GoBGP log through an injected *slog.Logger. Fatal is
// logged as an error and returns: a library must not exit the process.
type slogAdapter struct{ l *slog.Logger }

var _ gobgplog.Logger = slogAdapter{}

func attrs(f gobgplog.Fields) []any {
	keys := make([]string, 0, len(f))
	for k := range f {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]any, 0, 2*len(keys))
	for _, k := range keys {
		out = append(out, k, f[k])
	}
	return out
}

func (a slogAdapter) Panic(msg string, f gobgplog.Fields) {
	a.l.Error(msg, attrs(f)...)
	panic("gobgp: " + msg)
}

func (a slogAdapter) Fatal(msg string, f gobgplog.Fields) {
	a.l.Error(msg, append(attrs(f), "gobgp_level", "fatal")...)
}
func (a slogAdapter) Error(msg string, f gobgplog.Fields) { a.l.Error(msg, attrs(f)...) }
func (a slogAdapter) Warn(msg string, f gobgplog.Fields)  { a.l.Warn(msg, attrs(f)...) }
func (a slogAdapter) Info(msg string, f gobgplog.Fields)  { a.l.Info(msg, attrs(f)...) }
func (a slogAdapter) Debug(msg string, f gobgplog.Fields) { a.l.Debug(msg, attrs(f)...) }

// SetLevel is a no-op: the slog handler decides what is printed.
func (a slogAdapter) SetLevel(gobgplog.LogLevel) {}

// GetLevel lets GoBGP skip building debug messages nobody will see.
func (a slogAdapter) GetLevel() gobgplog.LogLevel {
	if a.l.Enabled(context.Background(), slog.LevelDebug) {
		return gobgplog.DebugLevel
	}
	return gobgplog.InfoLevel
}
