package cluster

import (
	"net/netip"
	"testing"
)

// The kernel's jhash is lookup3's hashlittle for byte keys: its
// published vectors (lookup3.c, driver5).
func TestJhash(t *testing.T) {
	for _, tc := range []struct {
		key  string
		seed uint32
		want uint32
	}{
		{"", 0, 0xdeadbeef},
		{"Four score and seven years ago", 0, 0x17770551},
		{"Four score and seven years ago", 1, 0xcd628161},
	} {
		if got := jhash([]byte(tc.key), tc.seed); got != tc.want {
			t.Errorf("jhash(%q, %d) = %#x, want %#x", tc.key, tc.seed, got, tc.want)
		}
	}
}

func TestFlowSlot(t *testing.T) {
	const size = 16381
	seen := map[uint64]bool{}
	for p := uint16(10000); p < 10100; p++ {
		s := FlowSlot(netip.AddrPortFrom(netip.MustParseAddr("203.0.113.10"), p), 0x5eed, size)
		if s >= size {
			t.Fatalf("port %d: slot %d of %d", p, s, size)
		}
		seen[s] = true
	}
	if len(seen) < 95 {
		t.Errorf("100 ports hashed to %d slots of %d: want them spread", len(seen), size)
	}
}
