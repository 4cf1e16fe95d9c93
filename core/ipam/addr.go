package ipam

import (
	"fmt"
	"math"
	"math/bits"
	"net/netip"
	"strings"
)

// Family is an IP address family.
type Family uint8

const (
	IPv4 Family = iota + 1
	IPv6
)

func (f Family) String() string {
	switch f {
	case IPv4:
		return "IPv4"
	case IPv6:
		return "IPv6"
	}
	return fmt.Sprintf("Family(%d)", uint8(f))
}

// FamilyOf returns the family of a valid address.
func FamilyOf(a netip.Addr) Family {
	if a.Is4() {
		return IPv4
	}
	return IPv6
}

// Range is an inclusive range of addresses of one family.
type Range struct {
	First, Last netip.Addr
}

func (r Range) String() string {
	return r.First.String() + "-" + r.Last.String()
}

// Contains reports whether a lies within the range.
func (r Range) Contains(a netip.Addr) bool {
	return a.BitLen() == r.First.BitLen() && r.First.Compare(a) <= 0 && a.Compare(r.Last) <= 0
}

// Family returns the range's address family.
func (r Range) Family() Family { return FamilyOf(r.First) }

// ParseRange parses a CIDR ("192.0.2.0/24", "2001:db8::/120") or an
// inclusive range of two addresses of one family ("192.0.2.10-192.0.2.20").
// CIDRs with host bits set, zoned and IPv4-mapped IPv6 addresses are
// rejected: they are almost always typing mistakes.
func ParseRange(s string) (Range, error) {
	s = strings.TrimSpace(s)
	if first, last, ok := strings.Cut(s, "-"); ok {
		a, err := parseAddr(strings.TrimSpace(first))
		if err != nil {
			return Range{}, fmt.Errorf("range %q: %w", s, err)
		}
		b, err := parseAddr(strings.TrimSpace(last))
		if err != nil {
			return Range{}, fmt.Errorf("range %q: %w", s, err)
		}
		if a.BitLen() != b.BitLen() {
			return Range{}, fmt.Errorf("range %q mixes IPv4 and IPv6", s)
		}
		if b.Less(a) {
			return Range{}, fmt.Errorf("range %q ends before it starts", s)
		}
		return Range{First: a, Last: b}, nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return Range{}, fmt.Errorf("%q is neither a CIDR nor a range a-b: %w", s, err)
	}
	if p.Addr().Is4In6() {
		return Range{}, fmt.Errorf("CIDR %q is IPv4-mapped IPv6; write it as IPv4", s)
	}
	if m := p.Masked(); m != p {
		return Range{}, fmt.Errorf("CIDR %q has host bits set (did you mean %s?)", s, m)
	}
	return Range{First: p.Addr(), Last: lastOf(p)}, nil
}

func parseAddr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, err
	}
	if a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("address %q has a zone", s)
	}
	if a.Is4In6() {
		return netip.Addr{}, fmt.Errorf("address %q is IPv4-mapped IPv6; write it as IPv4", s)
	}
	return a, nil
}

// lastOf returns the last address of a masked prefix.
func lastOf(p netip.Prefix) netip.Addr {
	b := p.Addr().As16()
	off := 0
	if p.Addr().Is4() {
		off = 12
	}
	for i := p.Bits(); i < p.Addr().BitLen(); i++ {
		b[off+i/8] |= 0x80 >> (i % 8)
	}
	if p.Addr().Is4() {
		return netip.AddrFrom4([4]byte(b[12:]))
	}
	return netip.AddrFrom16(b)
}

// buggy reports whether a is an IPv4 address ending in .0 or .255, which
// the smurf protection of some consumer routers drops.
func buggy(a netip.Addr) bool {
	if !a.Is4() {
		return false
	}
	last := a.As4()[3]
	return last == 0 || last == 255
}

// addrBits returns an address as a 128-bit number (IPv4 in the low bits).
func addrBits(a netip.Addr) (hi, lo uint64) {
	b := a.As16()
	if a.Is4() {
		return 0, uint64(b[12])<<24 | uint64(b[13])<<16 | uint64(b[14])<<8 | uint64(b[15])
	}
	for i := range 8 {
		hi = hi<<8 | uint64(b[i])
		lo = lo<<8 | uint64(b[8+i])
	}
	return hi, lo
}

// size returns the number of addresses in r, saturating at
// math.MaxUint64, minus the buggy ones when avoidBuggy is set.
func (r Range) size(avoidBuggy bool) uint64 {
	fh, fl := addrBits(r.First)
	lh, ll := addrBits(r.Last)
	dl, borrow := bits.Sub64(ll, fl, 0)
	dh, _ := bits.Sub64(lh, fh, borrow)
	if dh != 0 || dl == math.MaxUint64 {
		return math.MaxUint64
	}
	n := dl + 1
	if avoidBuggy && r.First.Is4() {
		n -= buggyUpTo(ll) - buggyBelow(fl)
	}
	return n
}

// buggyUpTo counts the IPv4 addresses in [0, v] ending in .0 or .255.
func buggyUpTo(v uint64) uint64 {
	n := (v/256)*2 + 1 // .0 and .255 of every full /24, plus .0 of v's /24
	if v%256 == 255 {
		n++
	}
	return n
}

// buggyBelow counts the IPv4 addresses in [0, v) ending in .0 or .255.
func buggyBelow(v uint64) uint64 {
	if v == 0 {
		return 0
	}
	return buggyUpTo(v - 1)
}
