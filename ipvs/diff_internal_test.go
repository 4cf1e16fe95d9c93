package ipvs

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestDiffDestinationsWalk: the one walk over two sorted destination
// lists gives the ops the map gave, in the same order, for random lists
// (shared, added, gone and reweighted real servers); input out of order
// takes the map.
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
		mapDests, mapDrains := diffDestinationsUnsorted(key, want, have, nil, nil)
		opts := []cmp.Option{cmpopts.EquateComparable(netip.Addr{}), cmpopts.EquateEmpty()}
		if diff := cmp.Diff(mapDests, walkDests, opts...); diff != "" {
			t.Fatalf("round %d: adds and updates (-map +walk):\n%s", round, diff)
		}
		if diff := cmp.Diff(mapDrains, walkDrains, opts...); diff != "" {
			t.Fatalf("round %d: drains (-map +walk):\n%s", round, diff)
		}
		// Out of order: the same ops as the map gives the same input.
		rng.Shuffle(len(want), func(i, j int) { want[i], want[j] = want[j], want[i] })
		gotDests, gotDrains := diffDestinations(key, want, slices.Clone(have), nil, nil)
		wantDests, wantDrains := diffDestinationsUnsorted(key, want, have, nil, nil)
		if diff := cmp.Diff(wantDests, gotDests, opts...); diff != "" {
			t.Fatalf("round %d, shuffled: adds and updates (-map +got):\n%s", round, diff)
		}
		if diff := cmp.Diff(wantDrains, gotDrains, opts...); diff != "" {
			t.Fatalf("round %d, shuffled: drains (-map +got):\n%s", round, diff)
		}
	}
}
