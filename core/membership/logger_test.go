package membership

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestStdLoggerRoutesToSlog(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
		Level: slog.LevelDebug,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	std := newStdLogger(l)
	std.Printf("[DEBUG] memberlist: Stream connection from=127.0.0.1:1")
	std.Printf("[WARN] memberlist: Refuting a dead message (from: node-1)")
	std.Printf("[ERR] memberlist: Failed to send ping: boom")
	std.Printf("[TRACE] memberlist: too chatty")
	std.Printf("no level at all")
	want := `level=DEBUG msg="Stream connection from=127.0.0.1:1"
level=WARN msg="Refuting a dead message (from: node-1)"
level=ERROR msg="Failed to send ping: boom"
level=INFO msg="no level at all"
`
	if diff := cmp.Diff(want, buf.String()); diff != "" {
		t.Errorf("slog output (-want +got):\n%s", diff)
	}
}
