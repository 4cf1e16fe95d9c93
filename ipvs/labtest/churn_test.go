//go:build linux

package labtest

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/ipvs"
)

// TestDataplaneOtherNamespaceChurn programs and deletes Services while
// another network namespace adds and deletes IPVS services (another
// node's daemon in the cluster lab, any IPVS user elsewhere). The kernel
// resumes its dump of the services at an index that counts every
// namespace's (ipvs package doc), so this namespace's dumps leave some out
// meanwhile; the dataplane must still know them: a full resync of an
// unchanged plan changes nothing (a service it missed would be re-created
// and fail with ErrExists), and deleting the Services deletes every one
// of their virtual services (a missed one stayed while its address left
// switchyard0: the cluster lab soak's leftovers). The dumps and the reads
// of /proc/net/ip_vs that left services out are counted and logged, not
// asserted: the interleaving is the guest's.
func TestDataplaneOtherNamespaceChurn(t *testing.T) {
	requireGuest(t)
	clearPlan(t)
	const services, rounds, churn = 200, 3, 200
	other, err := newNamespace("churn")
	if err != nil {
		t.Fatal(err)
	}
	defer other.close()
	var k *ipvs.Netlink
	if err := other.Do(func() (err error) { k, err = ipvs.NewNetlink(); return err }); err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	var changes atomic.Int64
	wg.Go(func() {
		svc := func(i int) ipvs.Service {
			return ipvs.Service{VirtualServiceKey: model.VirtualServiceKey{
				Addr: netip.AddrFrom4([4]byte{10, 98, byte(i >> 8), byte(i)}), Port: 80, Protocol: model.TCP}, Scheduler: "rr"}
		}
		for ctx.Err() == nil {
			for i := range churn {
				if k.AddService(svc(i)) == nil {
					changes.Add(1)
				}
			}
			for i := range churn {
				if k.DeleteService(svc(i).VirtualServiceKey) == nil {
					changes.Add(1)
				}
			}
		}
	})
	defer func() { stop(); wg.Wait() }()

	vip := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 97, byte(i >> 8), byte(i)}) }
	vss := map[string]model.VirtualService{}
	for i := range services {
		vss[fmt.Sprint("churn-", i)] = clusterIP(vip(i).String(), 80, model.TCP, "rr", backends(false, 8080, 1))
	}
	plan := planOf(vss)
	key := func(i int) model.VirtualServiceKey {
		return model.VirtualServiceKey{Addr: vip(i), Port: 80, Protocol: model.TCP}
	}
	ours := func(k model.VirtualServiceKey) bool {
		return k.Addr.Is4() && k.Addr.As4()[0] == 10 && k.Addr.As4()[1] == 97
	}
	root, err := ipvs.NewNetlink()
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	// count reads this namespace's services three ways: exactly (a
	// lookup per key), through the dump and through /proc/net/ip_vs.
	count := func() (exact, dumped, proc int) {
		for i := range services {
			if _, err := root.Service(key(i)); err == nil {
				exact++
			} else if !errors.Is(err, ipvs.ErrNotFound) {
				t.Fatal(err)
			}
		}
		svcs, err := root.Services()
		if err != nil {
			t.Fatal(err)
		}
		seen := map[model.VirtualServiceKey]bool{}
		for _, s := range svcs {
			if ours(s.VirtualServiceKey) && !seen[s.VirtualServiceKey] {
				seen[s.VirtualServiceKey] = true
				dumped++
			}
		}
		table, err := root.ReadTable()
		if err != nil {
			t.Fatal(err)
		}
		for k := range table {
			if ours(k) {
				proc++
			}
		}
		return exact, dumped, proc
	}
	l := newLabDataplane(t)
	var reads, shortDumps, shortProcs int
	for r := range rounds {
		if err := l.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
			t.Fatalf("round %d: program %d Services: %v", r, services, err)
		}
		for range 3 {
			exact, dumped, proc := count()
			if exact != services {
				t.Fatalf("round %d: the kernel holds %d of the %d services", r, exact, services)
			}
			reads++
			if dumped < exact {
				shortDumps++
			}
			if proc < exact {
				shortProcs++
			}
		}
		before := l.changes()
		if err := l.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
			t.Errorf("round %d: a full resync of the same plan: %v", r, err)
		}
		if n := l.changes() - before; n != 0 {
			t.Errorf("round %d: a full resync of the same plan made %d changes, want 0", r, n)
		}
		if err := l.Apply(t.Context(), plugin.Update{Plan: &model.Plan{}, Full: true}); err != nil {
			t.Errorf("round %d: delete the Services: %v", r, err)
		}
		if exact, _, _ := count(); exact != 0 {
			t.Errorf("round %d: %d virtual services left once their Services were deleted, want 0", r, exact)
		}
	}
	t.Logf("of %d readings of this namespace's %d services while another namespace made %d changes, %d dumps and %d reads of /proc/net/ip_vs left some out",
		reads, services, changes.Load(), shortDumps, shortProcs)
}
