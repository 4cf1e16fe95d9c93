package ipam

import (
	"math"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseRange(t *testing.T) {
	tests := []struct {
		in      string
		want    string // Range.String(), "" when an error is expected
		wantErr bool
	}{
		{in: "192.0.2.0/24", want: "192.0.2.0-192.0.2.255"},
		{in: " 192.0.2.10 - 192.0.2.20 ", want: "192.0.2.10-192.0.2.20"},
		{in: "192.0.2.7/32", want: "192.0.2.7-192.0.2.7"},
		{in: "10.0.0.0/8", want: "10.0.0.0-10.255.255.255"},
		{in: "2001:db8::/64", want: "2001:db8::-2001:db8::ffff:ffff:ffff:ffff"},
		{in: "2001:db8::/121", want: "2001:db8::-2001:db8::7f"},
		{in: "2001:db8::1-2001:db8::1:0", want: "2001:db8::1-2001:db8::1:0"},
		{in: "192.0.2.5/24", wantErr: true}, // host bits
		{in: "192.0.2.20-192.0.2.10", wantErr: true},
		{in: "192.0.2.1-2001:db8::1", wantErr: true},
		{in: "::ffff:192.0.2.0/120", wantErr: true},
		{in: "fe80::1%eth0-fe80::2%eth0", wantErr: true},
		{in: "192.0.2.300/24", wantErr: true},
		{in: "pool", wantErr: true},
		{in: "", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			r, err := ParseRange(tt.in)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("ParseRange(%q) = %v, want an error", tt.in, r)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseRange(%q): %v", tt.in, err)
			}
			if diff := cmp.Diff(tt.want, r.String()); diff != "" {
				t.Errorf("ParseRange(%q) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestRangeSize(t *testing.T) {
	tests := []struct {
		r          string
		avoidBuggy bool
		want       uint64
	}{
		{"192.0.2.0/24", false, 256},
		{"192.0.2.0/24", true, 254},
		{"10.0.0.0/16", true, 65536 - 512},
		{"10.0.0.250-10.0.1.5", false, 12},
		{"10.0.0.250-10.0.1.5", true, 10},
		{"10.0.0.255/32", true, 0},
		{"10.0.1.1-10.0.1.254", true, 254},
		{"0.0.0.0/0", true, 1<<32 - 1<<25},
		{"2001:db8::/112", true, 65536}, // avoiding is IPv4-only
		{"2001:db8::/65", false, 1 << 63},
		{"2001:db8::/64", false, math.MaxUint64}, // saturates
		{"2001:db8::/48", false, math.MaxUint64},
	}
	for _, tt := range tests {
		r, err := ParseRange(tt.r)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.size(tt.avoidBuggy); got != tt.want {
			t.Errorf("%s avoidBuggy=%v: size %d, want %d", tt.r, tt.avoidBuggy, got, tt.want)
		}
	}
}

// TestRangeSizeBrute checks buggy counting against enumeration.
func TestRangeSizeBrute(t *testing.T) {
	base := netip.MustParseAddr("10.0.0.0")
	for _, span := range [][2]int{{0, 0}, {0, 255}, {0, 256}, {1, 254}, {255, 256}, {250, 770}, {255, 511}} {
		first, last := base, base
		for range span[0] {
			first = first.Next()
		}
		for range span[1] {
			last = last.Next()
		}
		r := Range{first, last}
		var want uint64
		for a := first; a.Compare(last) <= 0; a = a.Next() {
			if !buggy(a) {
				want++
			}
		}
		if got := r.size(true); got != want {
			t.Errorf("%s: size %d, want %d", r, got, want)
		}
	}
}

func FuzzParseRange(f *testing.F) {
	for _, s := range []string{"192.0.2.0/24", "10.0.0.1-10.0.0.9", "2001:db8::/64", "::1-::2", "a-b", "1.2.3.4/33"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRange(s)
		if err != nil {
			return
		}
		if r.Last.Less(r.First) || r.First.BitLen() != r.Last.BitLen() || r.First.Zone() != "" {
			t.Fatalf("ParseRange(%q) = %v: not a range", s, r)
		}
		back, err := ParseRange(r.String())
		if err != nil || back != r {
			t.Fatalf("ParseRange(%q) = %v, which parses back as %v, %v", s, r, back, err)
		}
	})
}
