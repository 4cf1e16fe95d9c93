package logging

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"

	"k8s.io/klog/v2"
)

// Formats a logger can write.
const (
	FormatJSON = "json"
	FormatText = "text"
)

// Level maps a klog-style verbosity (--v) to a slog level: 0 is Info, and
// each step shows one more V level (klog's V(n) logs at slog level -n
// through SetSlogLogger), so --v=4 shows slog's Debug.
func Level(verbosity int) slog.Level {
	if verbosity < 0 {
		verbosity = 0
	}
	return slog.Level(-verbosity)
}

// New returns a logger writing format ("json" or "text") to w at the
// level --v=verbosity asks for. Records below Info are labelled with their
// V level ("V2"; slog's Debug is "V4") rather than slog's "DEBUG+2".
func New(w io.Writer, format string, verbosity int) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: Level(verbosity), ReplaceAttr: levelName}
	switch format {
	case FormatJSON:
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case FormatText:
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("unknown log format %q (want %s or %s)", format, FormatJSON, FormatText)
}

func levelName(groups []string, a slog.Attr) slog.Attr {
	if a.Key != slog.LevelKey || len(groups) > 0 {
		return a
	}
	if l, ok := a.Value.Any().(slog.Level); ok && l < slog.LevelInfo {
		a.Value = slog.StringValue("V" + strconv.Itoa(int(-l)))
	}
	return a
}

var klogMu sync.Mutex

// RouteKlog sends klog's output (client-go, informers) to log and sets
// klog's own verbosity filter to verbosity, so V(n) messages reach log
// exactly when --v allows them. klog is process-global: the last call wins.
func RouteKlog(log *slog.Logger, verbosity int) error {
	klogMu.Lock()
	defer klogMu.Unlock()
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	if err := fs.Set("v", strconv.Itoa(max(verbosity, 0))); err != nil {
		return fmt.Errorf("set klog verbosity: %w", err)
	}
	klog.SetSlogLogger(log)
	return nil
}
