package bgp

import (
	"bytes"
	"log/slog"
	"testing"

	gobgplog "github.com/osrg/gobgp/v3/pkg/log"
)

// TestSlogAdapter checks that GoBGP's logging reaches slog with its fields,
// that Fatal returns instead of exiting, and that the level follows the
// handler.
func TestSlogAdapter(t *testing.T) {
	tests := []struct {
		name string
		log  func(a slogAdapter)
		want string
	}{
		{"info with sorted fields", func(a slogAdapter) { a.Info("peer up", gobgplog.Fields{"Topic": "Peer", "Key": "10.0.0.1"}) },
			"level=INFO msg=\"peer up\" Key=10.0.0.1 Topic=Peer\n"},
		{"fatal returns", func(a slogAdapter) { a.Fatal("bad", gobgplog.Fields{"Err": "x"}) },
			"level=ERROR msg=bad Err=x gobgp_level=fatal\n"},
		{"debug filtered at info", func(a slogAdapter) { a.Debug("noise", nil) }, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			h := slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
				if a.Key == slog.TimeKey {
					return slog.Attr{}
				}
				return a
			}})
			tc.log(slogAdapter{slog.New(h)})
			if got := buf.String(); got != tc.want {
				t.Errorf("logged %q, want %q", got, tc.want)
			}
		})
	}
	if got := (slogAdapter{slog.New(slog.NewTextHandler(&bytes.Buffer{}, &slog.HandlerOptions{Level: slog.LevelDebug}))}).GetLevel(); got != gobgplog.DebugLevel {
		t.Errorf("GetLevel with a debug handler = %v, want DebugLevel", got)
	}
	if got := (slogAdapter{slog.New(slog.DiscardHandler)}).GetLevel(); got != gobgplog.InfoLevel {
		t.Errorf("GetLevel with a discarding handler = %v, want InfoLevel", got)
	}
}
