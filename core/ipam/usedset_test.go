package ipam

import (
	"math/rand/v2"
	"net/netip"
	"testing"
)

// TestUsedSetAgainstBrute drives usedSet with random adds and removes
// and compares firstFree with a brute-force search from every point.
func TestUsedSetAgainstBrute(t *testing.T) {
	for _, tc := range []struct {
		name       string
		first      string
		n          int
		avoidBuggy bool
	}{
		{"ipv4", "10.0.0.240", 600, false},
		{"ipv4 avoid", "10.0.0.240", 600, true},
		{"ipv4 top of space", "255.255.254.250", 262, true},
		{"ipv6", "2001:db8::fff0", 300, false},
		{"ipv6 across 64 bits", "2001:db8:0:1:ffff:ffff:ffff:ff80", 300, false},
		{"ipv6 top of space", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ff00", 256, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(tc.n)))
			addrs := make([]netip.Addr, tc.n)
			a := netip.MustParseAddr(tc.first)
			for i := range addrs {
				addrs[i] = a
				a = a.Next()
			}
			hi := addrs[len(addrs)-1]
			s := usedSet{avoidBuggy: tc.avoidBuggy, maxChunk: 4}
			used := make([]bool, tc.n)
			maxChunks := 0
			for step := range 4000 {
				i := rng.IntN(tc.n)
				if tc.avoidBuggy && buggy(addrs[i]) {
					continue
				}
				if used[i] {
					s.remove(toU128(addrs[i]))
				} else {
					s.add(toU128(addrs[i]))
				}
				used[i] = !used[i]
				for _, from := range []int{0, rng.IntN(tc.n)} {
					want := -1
					for j := from; j < tc.n; j++ {
						if !used[j] && !(tc.avoidBuggy && buggy(addrs[j])) {
							want = j
							break
						}
					}
					u, ok := s.firstFree(toU128(addrs[from]), toU128(hi))
					got := u.addr(FamilyOf(hi))
					switch {
					case want < 0 && ok:
						t.Fatalf("step %d: firstFree(%s) = %s, want none", step, addrs[from], got)
					case want >= 0 && (!ok || got != addrs[want]):
						t.Fatalf("step %d: firstFree(%s) = %s %v, want %s", step, addrs[from], got, ok, addrs[want])
					}
				}
				checkSpans(t, &s)
				for j, a := range addrs {
					if step%16 != 0 {
						break // the full check is slow under -race
					}
					if _, _, found := s.locate(toU128(a)); found != used[j] && !(tc.avoidBuggy && buggy(a)) {
						t.Fatalf("step %d: %s covered %v, used %v", step, a, found, used[j])
					}
				}
				maxChunks = max(maxChunks, len(s.chunks))
			}
			if maxChunks < 10 {
				t.Errorf("at most %d chunks: splitting was not exercised", maxChunks)
			}
		})
	}
}

// checkSpans checks that spans are sorted, disjoint, and separated by at
// least one address the pool may hand out.
func checkSpans(t *testing.T, s *usedSet) {
	t.Helper()
	var spans []span
	for ci, c := range s.chunks {
		if len(c) == 0 || len(c) > s.chunkLimit() {
			t.Fatalf("chunk %d holds %d spans", ci, len(c))
		}
		spans = append(spans, c...)
	}
	for i, sp := range spans {
		if sp.hi.cmp(sp.lo) < 0 {
			t.Fatalf("span %d: %v-%v is reversed", i, sp.lo, sp.hi)
		}
		if i > 0 && (spans[i-1].hi.cmp(sp.lo) >= 0 || s.adjacent(spans[i-1].hi, sp.lo)) {
			t.Fatalf("spans %v-%v and %v-%v overlap or should have merged", spans[i-1].lo, spans[i-1].hi, sp.lo, sp.hi)
		}
	}
}

func TestU128(t *testing.T) {
	for _, s := range []string{"0.0.0.0", "10.0.0.255", "255.255.255.255", "::", "2001:db8::ffff:ffff:ffff:ffff", "2001:db8::1:0:0:0:0"} {
		a := netip.MustParseAddr(s)
		u := toU128(a)
		if got := u.addr(FamilyOf(a)); got != a {
			t.Errorf("%s: round trip gives %s", s, got)
		}
		if a.Next().IsValid() {
			n, ok := u.next()
			if !ok || n.addr(FamilyOf(a)) != a.Next() || n.prev() != u {
				t.Errorf("%s: next %v %v, want %s", s, n.addr(FamilyOf(a)), ok, a.Next())
			}
		}
	}
	if _, ok := toU128(netip.MustParseAddr("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")).next(); ok {
		t.Error("next of the last IPv6 address did not report the wrap")
	}
}
