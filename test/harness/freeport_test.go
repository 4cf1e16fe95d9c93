package harness

import (
	"net"
	"net/netip"
	"strconv"
	"testing"
)

func TestFreePort(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	for _, tc := range []struct {
		name  string
		first int
		below bool // whether every port must lie below first
	}{
		{name: "below the ephemeral range", first: 32768, below: true},
		{name: "no room below it: the kernel picks", first: lowestPort + 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen := map[int]bool{}
			for range 50 {
				p, err := freePort(lo, tc.first)
				if err != nil {
					t.Fatal(err)
				}
				if seen[p] {
					t.Fatalf("port %d handed out twice", p)
				}
				seen[p] = true
				if tc.below && (p < lowestPort || p >= tc.first) {
					t.Errorf("port %d outside [%d, %d)", p, lowestPort, tc.first)
				}
				l, err := net.Listen("tcp", net.JoinHostPort(lo.String(), strconv.Itoa(p)))
				if err != nil {
					t.Fatalf("port %d not free: %v", p, err)
				}
				l.Close()
			}
		})
	}
}

func TestEphemeralFirst(t *testing.T) {
	if got := ephemeralFirst(); got <= 1024 || got > 65535 {
		t.Errorf("ephemeralFirst() = %d, want a port above 1024", got)
	}
}
