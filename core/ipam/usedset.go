package ipam

import (
	"cmp"
	"net/netip"
	"slices"
)

// u128 is an address as a number: IPv4 in the low 32 bits. Unlike
// netip.Addr it holds no pointer, so spans move and compare cheaply.
type u128 struct{ hi, lo uint64 }

func toU128(a netip.Addr) u128 {
	h, l := addrBits(a)
	return u128{h, l}
}

func (u u128) addr(f Family) netip.Addr {
	if f == IPv4 {
		return netip.AddrFrom4([4]byte{byte(u.lo >> 24), byte(u.lo >> 16), byte(u.lo >> 8), byte(u.lo)})
	}
	var b [16]byte
	for i := range 8 {
		b[i] = byte(u.hi >> (56 - 8*i))
		b[8+i] = byte(u.lo >> (56 - 8*i))
	}
	return netip.AddrFrom16(b)
}

func (u u128) cmp(o u128) int { return cmp.Or(cmp.Compare(u.hi, o.hi), cmp.Compare(u.lo, o.lo)) }

// next returns u+1; ok is false when it wraps around.
func (u u128) next() (u128, bool) {
	if u.lo++; u.lo == 0 {
		u.hi++
		return u, u.hi != 0
	}
	return u, true
}

// prev returns u-1; u must not be zero.
func (u u128) prev() u128 {
	if u.lo == 0 {
		u.hi--
	}
	u.lo--
	return u
}

// span is an inclusive run of addresses.
type span struct{ lo, hi u128 }

// defaultChunk bounds the spans of one chunk: an update moves at most
// that many spans plus one slice header per chunk.
const defaultChunk = 128

// usedSet indexes the used addresses of one family of one pool as sorted,
// disjoint, merged spans, so that the lowest free address at or after a
// point is found with binary searches instead of a walk over the pool.
//
// With avoidBuggy (IPv4 only), the addresses the pool never hands out
// (.0 and .255) count as used for merging: the gap between two spans
// always holds at least one address that can be handed out, which bounds
// firstFree to a few steps whatever the fragmentation. Spans are kept in
// sorted chunks of at most defaultChunk, so an update costs binary
// searches and a copy of at most one chunk (plus the list of chunks when
// one splits or empties), however fragmented the pool.
type usedSet struct {
	avoidBuggy bool
	maxChunk   int // 0 means defaultChunk; tests set it small
	chunks     [][]span
}

func (s *usedSet) chunkLimit() int {
	if s.maxChunk > 0 {
		return s.maxChunk
	}
	return defaultChunk
}

func (s *usedSet) avoided(u u128) bool {
	return s.avoidBuggy && (u.lo&0xff == 0 || u.lo&0xff == 0xff)
}

// len returns the number of spans.
func (s *usedSet) len() int {
	n := 0
	for _, c := range s.chunks {
		n += len(c)
	}
	return n
}

// locate returns the position of the span containing u, found, or the
// position at which a span starting at u would be inserted.
func (s *usedSet) locate(u u128) (ci, i int, found bool) {
	ci, _ = slices.BinarySearchFunc(s.chunks, u, func(c []span, u u128) int { return c[len(c)-1].hi.cmp(u) })
	if ci == len(s.chunks) {
		if ci == 0 {
			return 0, 0, false
		}
		return ci - 1, len(s.chunks[ci-1]), false
	}
	i, found = slices.BinarySearchFunc(s.chunks[ci], u, func(sp span, u u128) int {
		if sp.hi.cmp(u) < 0 {
			return -1
		}
		if u.cmp(sp.lo) < 0 {
			return 1
		}
		return 0
	})
	return ci, i, found
}

// before returns the span preceding position (ci, i), if any.
func (s *usedSet) before(ci, i int) *span {
	switch {
	case i > 0:
		return &s.chunks[ci][i-1]
	case ci > 0:
		c := s.chunks[ci-1]
		return &c[len(c)-1]
	}
	return nil
}

// at normalises position (ci, i) to the span there, if any.
func (s *usedSet) at(ci, i int) (int, int, bool) {
	if ci < len(s.chunks) && i == len(s.chunks[ci]) {
		ci, i = ci+1, 0
	}
	return ci, i, ci < len(s.chunks)
}

func (s *usedSet) insertAt(ci, i int, sp span) {
	if len(s.chunks) == 0 {
		s.chunks = [][]span{{sp}}
		return
	}
	c := slices.Insert(s.chunks[ci], i, sp)
	if len(c) > s.chunkLimit() {
		h := len(c) / 2
		s.chunks = slices.Insert(s.chunks, ci+1, slices.Clone(c[h:]))
		c = c[:h]
	}
	s.chunks[ci] = c
}

func (s *usedSet) deleteAt(ci, i int) {
	c := slices.Delete(s.chunks[ci], i, i+1)
	switch {
	case len(c) == 0:
		s.chunks = slices.Delete(s.chunks, ci, ci+1)
		return
	case ci+1 < len(s.chunks) && len(c)+len(s.chunks[ci+1]) <= s.chunkLimit()/2:
		c = append(c, s.chunks[ci+1]...)
		s.chunks = slices.Delete(s.chunks, ci+1, ci+2)
	}
	s.chunks[ci] = c
}

// skip returns the first address at or after u that may be handed out;
// ok is false when the address space ends first.
func (s *usedSet) skip(u u128) (u128, bool) {
	ok := true
	for ok && s.avoided(u) {
		u, ok = u.next()
	}
	return u, ok
}

// adjacent reports whether a span ending at hi and one starting at lo
// (hi < lo) would have no address that may be handed out between them.
func (s *usedSet) adjacent(hi, lo u128) bool {
	g, ok := hi.next()
	if ok {
		g, ok = s.skip(g)
	}
	return ok && g.cmp(lo) >= 0
}

// firstFree returns the lowest address in [lo, hi] that is neither used
// nor avoided.
func (s *usedSet) firstFree(lo, hi u128) (u128, bool) {
	c, ok := lo, true
	for {
		if c, ok = s.skip(c); !ok || hi.cmp(c) < 0 {
			return u128{}, false
		}
		ci, i, found := s.locate(c)
		if !found {
			return c, true
		}
		if c, ok = s.chunks[ci][i].hi.next(); !ok {
			return u128{}, false
		}
	}
}

// add marks u used.
func (s *usedSet) add(u u128) {
	ci, i, found := s.locate(u)
	if found {
		return
	}
	prev := s.before(ci, i)
	nci, ni, hasNext := s.at(ci, i)
	left := prev != nil && s.adjacent(prev.hi, u)
	right := hasNext && s.adjacent(u, s.chunks[nci][ni].lo)
	switch {
	case left && right:
		prev.hi = s.chunks[nci][ni].hi
		s.deleteAt(nci, ni)
	case left:
		prev.hi = u
	case right:
		s.chunks[nci][ni].lo = u
	default:
		s.insertAt(ci, i, span{u, u})
	}
}

// remove marks u free.
func (s *usedSet) remove(u u128) {
	ci, i, found := s.locate(u)
	if !found {
		return
	}
	sp := s.chunks[ci][i]
	var keep [2]span
	n := 0
	if sp.lo != u {
		n += s.trim(keep[n:], sp.lo, u.prev())
	}
	if sp.hi != u {
		next, _ := u.next()
		n += s.trim(keep[n:], next, sp.hi)
	}
	switch n {
	case 0:
		s.deleteAt(ci, i)
	case 1:
		s.chunks[ci][i] = keep[0]
	case 2:
		s.chunks[ci][i] = keep[0]
		s.insertAt(ci, i+1, keep[1])
	}
}

// trim stores [lo, hi] without the avoided addresses at its ends in
// dst[0] and returns 1, or returns 0 when nothing else is left.
func (s *usedSet) trim(dst []span, lo, hi u128) int {
	lo, ok := s.skip(lo)
	for s.avoided(hi) && lo.cmp(hi) < 0 {
		hi = hi.prev()
	}
	if !ok || hi.cmp(lo) < 0 || s.avoided(lo) {
		return 0
	}
	dst[0] = span{lo, hi}
	return 1
}
