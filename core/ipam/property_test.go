package ipam

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/switchyard-lb/switchyard/core/model"
)

var propPools = []Pool{
	{Name: "edge", Addresses: []string{"10.0.0.250-10.0.1.4"}, AutoAssign: true, AvoidBuggyIPs: true},
	{Name: "v6", Addresses: []string{"fd00::/125"}, AutoAssign: true},
	{Name: "manual", Addresses: []string{"192.0.2.0/29", "fd00:1::/126"}},
	{Name: "prod", Addresses: []string{"10.9.0.0/30"}, AutoAssign: true, Namespaces: []string{"prod"}},
}

// propPoolsShrunk drops part of every pool but keeps their rules.
var propPoolsShrunk = []Pool{
	{Name: "edge", Addresses: []string{"10.0.0.250-10.0.0.254"}, AutoAssign: true, AvoidBuggyIPs: true},
	{Name: "v6", Addresses: []string{"fd00::/126"}, AutoAssign: true},
	{Name: "manual", Addresses: []string{"192.0.2.0/30", "fd00:1::/126"}},
	{Name: "prod", Addresses: []string{"10.9.0.0/31"}, AutoAssign: true, Namespaces: []string{"prod"}},
}

// candidates for requested addresses: inside, outside and avoided.
var propAddrs = addrs("10.0.0.251", "10.0.0.255", "10.0.1.0", "10.0.1.3", "fd00::5", "192.0.2.6",
	"fd00:1::2", "10.9.0.1", "198.51.100.1", "fd00:2::1")

func randomRequest(rng *rand.Rand) Request {
	r := Request{Key: model.ServiceKey{Namespace: []string{"default", "prod"}[rng.IntN(2)], Name: fmt.Sprint("s", rng.IntN(14))}}
	r.SharingKey = []string{"", "", "k1", "k2"}[rng.IntN(4)]
	r.BackendKey = []string{"", "", "b"}[rng.IntN(3)]
	for _, p := range []Port{tcp80, udp80, tcp443, {53, model.UDP}} {
		if rng.IntN(3) == 0 {
			r.Ports = append(r.Ports, p)
		}
	}
	switch rng.IntN(6) {
	case 0:
		r.Families = []Family{IPv6}
	case 1:
		r.Families = []Family{IPv4, IPv6}
	case 2:
		r.Families, r.PreferDualStack = []Family{IPv6, IPv4}, true
	}
	if rng.IntN(4) == 0 {
		r.RequestedIPs = []netip.Addr{propAddrs[rng.IntN(len(propAddrs))]}
		if rng.IntN(3) == 0 {
			r.RequestedIPs = append(r.RequestedIPs, propAddrs[rng.IntN(len(propAddrs))])
		}
		if rng.IntN(2) == 0 {
			r.Families = nil
		}
	}
	if rng.IntN(5) == 0 {
		r.Pool = []string{"edge", "v6", "manual", "prod", "gone"}[rng.IntN(5)]
	}
	return r
}

// TestPropertyRandomOperations applies random allocations, releases,
// syncs, pool changes and fail-overs, and after each checks that no
// address is duplicated, wrong or outside its pool, that the index agrees
// with a brute-force view, and that a fresh allocator given everything's
// published addresses keeps every one of them (fail-over without
// renumbering).
func TestPropertyRandomOperations(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			log1 := propertyRun(t, seed)
			log2 := propertyRun(t, seed)
			if diff := cmp.Diff(log1, log2); diff != "" {
				t.Fatalf("same operations, different decisions (-first +second):\n%s", diff)
			}
		})
	}
}

func propertyRun(t *testing.T, seed uint64) []string {
	rng := rand.New(rand.NewPCG(seed, 99))
	pools := propPools
	a, err := New(pools)
	if err != nil {
		t.Fatal(err)
	}
	last := map[model.ServiceKey]Request{} // the request each Service was last allocated with
	var log []string
	for step := range 600 {
		var op string
		switch n := rng.IntN(100); {
		case n < 70:
			r := randomRequest(rng)
			prev, had := last[r.Key]
			if had && rng.IntN(3) == 0 {
				r = prev
			}
			resent := had && sameRequest(prev, r)
			before := a.Assigned(r.Key)
			ips, err := a.Allocate(r)
			op = fmt.Sprintf("allocate %+v -> %v %v", r, ips, err)
			last[r.Key] = r
			if resent {
				// Re-sending a request may add a family, never move one.
				for _, b := range before {
					if !slices.Contains(ips, b) {
						t.Fatalf("step %d: %s: %v moved to %v", step, op, before, ips)
					}
				}
			}
		case n < 88:
			k := model.ServiceKey{Namespace: []string{"default", "prod"}[rng.IntN(2)], Name: fmt.Sprint("s", rng.IntN(14))}
			a.Release(k)
			delete(last, k)
			op = "release " + k.String()
		case n < 94:
			var reqs []Request
			for _, k := range sortedKeys(last) {
				if rng.IntN(8) == 0 {
					delete(last, k) // deleted while we were away
					continue
				}
				reqs = append(reqs, last[k])
			}
			res := a.Sync(reqs)
			op = fmt.Sprintf("sync -> %v", res)
		default:
			if rng.IntN(2) == 0 {
				pools = propPoolsShrunk
			} else {
				pools = propPools
			}
			lost, err := a.SetPools(pools)
			if err != nil {
				t.Fatal(err)
			}
			op = fmt.Sprintf("set pools -> lost %v", lost)
		}
		log = append(log, op)
		checkInvariants(t, a, last, step, op)
		if step%25 == 0 {
			checkFailover(t, a, pools, last, step)
		}
	}
	return log
}

func sameRequest(x, y Request) bool { return cmp.Equal(x, y, cmpopts.EquateComparable(netip.Addr{})) }

func checkInvariants(t *testing.T, a *Allocator, last map[model.ServiceKey]Request, step int, op string) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("step %d after %s: %s", step, op, fmt.Sprintf(format, args...))
	}
	holders := map[netip.Addr][]model.ServiceKey{}
	for k, rec := range a.records {
		r, ok := last[k]
		if !ok {
			fail("%s holds %v but was released", k, rec.ips)
		}
		fams := map[Family]bool{}
		for _, ip := range rec.ips {
			p := a.poolOf(ip)
			if p == nil {
				fail("%s holds %s, outside every pool", k, ip)
			}
			if p.AvoidBuggyIPs && buggy(ip) {
				fail("%s holds avoided %s", k, ip)
			}
			if fams[FamilyOf(ip)] {
				fail("%s holds two %s addresses: %v", k, FamilyOf(ip), rec.ips)
			}
			fams[FamilyOf(ip)] = true
			if len(r.RequestedIPs) > 0 && !slices.Contains(r.RequestedIPs, ip) {
				fail("%s holds %s, not requested (%v)", k, ip, r.RequestedIPs)
			}
			holders[ip] = append(holders[ip], k)
		}
	}
	for ip, ks := range holders {
		for i := range ks {
			for j := i + 1; j < len(ks); j++ {
				x, y := a.records[ks[i]], a.records[ks[j]]
				if x.sharingKey == "" || x.sharingKey != y.sharingKey || x.backendKey != y.backendKey {
					fail("%s held by %s and %s without a common sharing key", ip, ks[i], ks[j])
				}
				for _, p := range x.ports {
					if slices.Contains(y.ports, p) {
						fail("%s held by %s and %s, both on %s", ip, ks[i], ks[j], p)
					}
				}
			}
		}
		if !slices.Equal(slices.SortedFunc(slices.Values(ks), model.ServiceKey.Compare), a.users[ip]) {
			fail("users of %s are %v, want %v", ip, a.users[ip], ks)
		}
	}
	if len(holders) != len(a.users) {
		fail("%d addresses have users, %d are held", len(a.users), len(holders))
	}
	// The index agrees with brute force: used counts and lowest free.
	for _, p := range a.pools {
		used := 0
		for ip := range holders {
			if p.contains(ip) {
				used++
			}
		}
		if used != p.inUse {
			fail("pool %s counts %d used, holds %d", p.Name, p.inUse, used)
		}
		for _, f := range []Family{IPv4, IPv6} {
			var want netip.Addr
		search:
			for _, r := range p.ranges {
				for ip := r.First; r.Contains(ip); ip = ip.Next() {
					if _, held := holders[ip]; !held && p.contains(ip) && FamilyOf(ip) == f {
						want = ip
						break search
					}
				}
			}
			got, _ := p.firstFree(f)
			if got != want {
				fail("pool %s: lowest free %s is %s, brute force says %s", p.Name, f, got, want)
			}
		}
	}
}

// checkFailover gives a fresh allocator what every Service publishes and
// checks that every Service keeps every address it holds.
func checkFailover(t *testing.T, a *Allocator, pools []Pool, last map[model.ServiceKey]Request, step int) {
	t.Helper()
	b, err := New(pools)
	if err != nil {
		t.Fatal(err)
	}
	var reqs []Request
	for _, k := range sortedKeys(last) {
		r := last[k]
		r.Current = a.Assigned(k)
		reqs = append(reqs, r)
	}
	for _, res := range b.Sync(reqs) {
		for _, ip := range a.Assigned(res.Key) {
			if !slices.Contains(res.IPs, ip) {
				t.Fatalf("step %d: fail-over renumbered %s: held %v, new leader gives %v (%v)", step, res.Key, a.Assigned(res.Key), res.IPs, res.Err)
			}
		}
	}
}
