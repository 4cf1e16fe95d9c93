package membership

import (
	"bytes"
	"context"
	"log"
	"log/slog"
)

// newStdLogger returns a *log.Logger, the only logger memberlist takes,
// whose lines go to l. memberlist writes "[LEVEL] memberlist: message";
// the level becomes the slog level and the prefix is dropped.
func newStdLogger(l *slog.Logger) *log.Logger {
	return log.New(slogWriter{l}, "", 0)
}

type slogWriter struct{ l *slog.Logger }

var levels = []struct {
	tag   string
	level slog.Level
}{
	{"[TRACE]", slog.LevelDebug - 4},
	{"[DEBUG]", slog.LevelDebug},
	{"[INFO]", slog.LevelInfo},
	{"[WARN]", slog.LevelWarn},
	{"[ERR]", slog.LevelError},
	{"[ERROR]", slog.LevelError},
}

func (w slogWriter) Write(p []byte) (int, error) {
	line := bytes.TrimSpace(p)
	level := slog.LevelInfo
	for _, lv := range levels {
		if rest, ok := bytes.CutPrefix(line, []byte(lv.tag)); ok {
			level, line = lv.level, bytes.TrimSpace(rest)
			break
		}
	}
	line = bytes.TrimPrefix(line, []byte("memberlist: "))
	w.l.Log(context.Background(), level, string(line))
	return len(p), nil
}
