package ipvs

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestDiffDestinationsWalk: the one walk over two sorted destination
// lists gives the ops a map of the kernel's gives (diffByMap, the former
// implementation), in the same order, for random lists (shared, added,
// gone and reweighted real servers).
func TestDiffDestinationsWalk(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	key := Service{}
	dest := func(i int) DestinationKey {
		return DestinationKey{Addr: netip.AddrFrom4([4]byte{10, 244, byte(i / 4), byte(i)}), Port: uint16(8080 + i%3)}
	}
	for round := range 500 {
		var want []Destination
		var have []DestinationState
		for i := range rng.IntN(24) {
			k := dest(i)
			switch rng.IntN(4) {
			case 0: // wanted, not in the kernel
				want = append(want, Destination{DestinationKey: k, Weight: uint32(rng.IntN(3))})
			case 1: // in the kernel, not wanted
				have = append(have, DestinationState{Destination: Destination{DestinationKey: k, Weight: uint32(rng.IntN(3))}})
			case 2: // both, maybe reweighted
				w := uint32(rng.IntN(3))
				want = append(want, Destination{DestinationKey: k, Weight: w})
				have = append(have, DestinationState{Destination: Destination{DestinationKey: k, Weight: w + uint32(rng.IntN(2))}})
			}
		}
		walkDests, walkDrains := diffDestinations(key, want, have, nil, nil)
		mapDests, mapDrains := diffByMap(key, want, have, nil, nil)
		opts := []cmp.Option{cmpopts.EquateComparable(netip.Addr{}), cmpopts.EquateEmpty()}
		if diff := cmp.Diff(mapDests, walkDests, opts...); diff != "" {
			t.Fatalf("round %d: adds and updates (-map +walk):\n%s", round, diff)
		}
		if diff := cmp.Diff(mapDrains, walkDrains, opts...); diff != "" {
			t.Fatalf("round %d: drains (-map +walk):\n%s", round, diff)
		}
	}
}

// diffByMap is diffDestinations by a map of have's destinations, the
// way Diff did it before the walk: the test's oracle.
func diffByMap(key Service, want []Destination, have []DestinationState, dests, drains []Op) ([]Op, []Op) {
	cur := make(map[DestinationKey]DestinationState, len(have))
	for _, d := range have {
		cur[d.DestinationKey] = d
	}
	for _, d := range want {
		c, ok := cur[d.DestinationKey]
		delete(cur, d.DestinationKey)
		switch {
		case !ok:
			dests = append(dests, Op{Kind: OpAddDestination, Service: key, Dest: d})
		case c.Destination != d:
			dests = append(dests, Op{Kind: OpUpdateDestination, Service: key, Dest: d})
		}
	}
	for _, d := range have {
		if _, ok := cur[d.DestinationKey]; ok {
			drains = append(drains, Op{Kind: OpDrainDestination, Service: key, Dest: d.Destination})
		}
	}
	return dests, drains
}
