package ipam

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/switchyard-lb/switchyard/core/model"
)

// fill allocates n Services in a, then releases each with probability
// holes/n, leaving the pool fragmented.
func fill(b *testing.B, a *Allocator, fams []Family, n, holes int) {
	b.Helper()
	for i := range n {
		if _, err := a.Allocate(Request{Key: model.ServiceKey{Namespace: "bench", Name: fmt.Sprint(i)}, Families: fams}); err != nil {
			b.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for released := 0; released < holes; {
		if a.Release(model.ServiceKey{Namespace: "bench", Name: fmt.Sprint(rng.IntN(n))}) {
			released++
		}
	}
}

// BenchmarkAllocate measures one allocation plus one release with 60,000
// addresses used: in a /16 filled in order, in a /16 with 5,536 random
// holes (5,000+ fragments), and in an IPv6 /64.
func BenchmarkAllocate(b *testing.B) {
	for _, bc := range []struct {
		name     string
		cidr     string
		fams     []Family
		n, holes int
	}{
		{"v4-slash16-60k-contiguous", "10.0.0.0/16", nil, 60000, 0},
		{"v4-slash16-60k-fragmented", "10.0.0.0/16", nil, 65536, 5536},
		{"v4-slash16-60k-avoidbuggy", "10.0.0.0/16", nil, 60000, 0},
		{"v6-slash64-60k-fragmented", "2001:db8::/64", []Family{IPv6}, 65536, 5536},
	} {
		b.Run(bc.name, func(b *testing.B) {
			a, err := New([]Pool{{Name: "p", Addresses: []string{bc.cidr}, AutoAssign: true, AvoidBuggyIPs: bc.name == "v4-slash16-60k-avoidbuggy"}})
			if err != nil {
				b.Fatal(err)
			}
			fill(b, a, bc.fams, bc.n, bc.holes)
			if used := a.Stats()[0].Used; used != 60000 {
				b.Fatalf("%d used, want 60000", used)
			}
			k := model.ServiceKey{Namespace: "bench", Name: "new"}
			for b.Loop() {
				if _, err := a.Allocate(Request{Key: k, Families: bc.fams}); err != nil {
					b.Fatal(err)
				}
				a.Release(k)
			}
			b.ReportMetric(float64(a.pools[0].used4.len()+a.pools[0].used6.len()), "spans")
		})
	}
}
