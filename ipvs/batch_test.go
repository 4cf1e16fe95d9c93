package ipvs_test

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/ipvs/ipvstest"
)

// startPlan is 100 ClusterIP Services, webPlan's Services (a NodePort
// among them, which the firewall table records) and a Local LoadBalancer
// with an in-cluster firewall-mark service.
func startPlan() *model.Plan {
	p := webPlan(be("10.244.1.2", 8080, 1), be("10.244.2.2", 8080, 2))
	for k, sp := range benchPlan(100).Services {
		a := sp.VirtualServices[0].Addr.As4() // 10.96.0.x: keyA's among them
		sp.VirtualServices[0].Addr = netip.AddrFrom4([4]byte{10, 97, a[2], a[3]})
		p.Services[k] = sp
	}
	lb := model.ServiceKey{Namespace: "default", Name: "lb"}
	dests := []model.Destination{be("10.244.1.4", 8080, 1), be("10.244.2.4", 8080, 1)}
	p.Services[lb] = &model.ServicePlan{Key: lb, VirtualServices: []model.VirtualService{{
		VirtualServiceKey: model.VirtualServiceKey{Addr: netip.MustParseAddr("192.0.2.10"), Port: 443, Protocol: model.TCP},
		Kind:              model.FrontendLoadBalancer, Local: true, Destinations: dests[:1], Internal: dests,
	}}}
	return p
}

// TestDataplaneFirstStartBatches checks that a first start asks the kernel
// for no service on its own (a get per wanted service had cost a round
// trip each before the first apply) and sends its changes a stage at a
// time: the addresses in one batch, the services in another, then their
// real servers. A restart over the table it wrote asks, changes and sends
// nothing.
func TestDataplaneFirstStartBatches(t *testing.T) {
	r := newRig()
	fw := &ipvstest.FakeFirewall{}
	plan := startPlan()
	for _, name := range []string{"first start", "restart"} {
		gets, batches, mutations := r.kernel.Calls(ipvstest.OpService), r.kernel.Calls(ipvstest.OpBatch), r.mutations()
		binds := r.addrs.Batches()
		dp := r.plainDataplane(t, func(c *ipvs.Config) { c.Firewall = fw })
		if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
			t.Fatalf("%s: Apply: %v", name, err)
		}
		got := [4]int{r.kernel.Calls(ipvstest.OpService) - gets, r.addrs.Batches() - binds,
			r.kernel.Calls(ipvstest.OpBatch) - batches, r.mutations() - mutations}
		// Services: 100, web's 3, the LoadBalancer and its mark
		// service; real servers: 10 each, 2 each, 1 and 2.
		want := [4]int{0, 1, 2, 100 + 3 + 2 + 100*10 + 3*2 + 1 + 2}
		if name == "restart" {
			want = [4]int{}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: service gets, address batches, IPVS batches, IPVS changes (-want +got):\n%s", name, diff)
		}
	}
	if n := len(r.kernel.Table()); n != 100+3+2 {
		t.Errorf("kernel holds %d services, want %d", n, 100+3+2)
	}
}

// TestDataplaneResolvesLeftOutWantedService restarts the dataplane over a
// table whose dump leaves out a wanted service that someone changed
// meanwhile (another scheduler, another weight, a real server too many).
// The dataplane never had it, so it does not ask for it; its add fails with
// "already exists", and one exact get (with its real servers) makes it a
// service the dataplane has: repaired in the same Apply, with no error.
func TestDataplaneResolvesLeftOutWantedService(t *testing.T) {
	for _, addOnly := range []bool{false, true} {
		t.Run(fmt.Sprintf("add-only=%t", addOnly), func(t *testing.T) {
			r := newRig()
			plan := webPlan(be("10.244.1.2", 8080, 1), be("10.244.2.2", 8080, 2))
			if err := r.dataplane(t).Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
				t.Fatal(err)
			}
			want := r.kernel.Table()
			stale := ipvs.Destination{DestinationKey: ipvs.DestinationKey{Addr: vipA.Next(), Port: 8080}, Weight: 1}
			if err := errors.Join(
				r.kernel.UpdateService(ipvs.Service{VirtualServiceKey: keyA, Scheduler: "sh"}),
				r.kernel.UpdateDestination(keyA, ipvs.Destination{DestinationKey: ipvs.DestinationKey{Addr: be("10.244.1.2", 8080, 0).Addr, Port: 8080}, Weight: 9}),
				r.kernel.AddDestination(keyA, stale),
			); err != nil {
				t.Fatal(err)
			}
			if addOnly {
				// The add-only Apply removes nothing: the stale real
				// server stays as it is.
				for i, e := range want {
					if e.Service.VirtualServiceKey == keyA {
						want[i].Destinations = append(slices.Clone(e.Destinations), ipvs.DestinationState{Destination: stale})
						ipvs.SortDestinations(want[i].Destinations)
					}
				}
			}

			gets := r.kernel.Calls(ipvstest.OpService)
			r.kernel.SkipInDump(keyA)
			dp := r.dataplane(t) // a restart: the cache knows nothing
			u := plugin.Update{Plan: plan, Full: true}
			apply := dp.Apply
			if addOnly {
				u, apply = plugin.Update{Plan: plan, Changed: []model.ServiceKey{svcWeb, svcDNS}}, dp.ApplyAddOnly
			}
			if err := apply(t.Context(), u); err != nil {
				t.Fatalf("Apply with %v left out of the dump: %v", keyA, err)
			}
			if diff := cmp.Diff(want, r.kernel.Table(), cmpAddrs); diff != "" {
				t.Errorf("kernel after the Apply (-want +got):\n%s", diff)
			}
			if n := r.kernel.Calls(ipvstest.OpService) - gets; n != 1 {
				t.Errorf("%d service gets, want 1 (the left-out service's)", n)
			}
			if addOnly {
				return
			}
			mutations := r.mutations()
			if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
				t.Fatal(err)
			}
			if n := r.mutations() - mutations; n != 0 {
				t.Errorf("%d kernel changes in the next full Apply, want 0", n)
			}
		})
	}
}

// TestDataplaneBatchNotSent checks that a batch the kernel never got fails
// the Apply with every command's error, records nothing as done, and that
// the next Apply programs it all.
func TestDataplaneBatchNotSent(t *testing.T) {
	r := newRig()
	dp := r.dataplane(t)
	plan := webPlan(be("10.244.1.2", 8080, 1), be("10.244.2.2", 8080, 2))
	boom := errors.New("sendmsg: no buffer space")
	r.kernel.SetError(ipvstest.OpBatch, boom)
	err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true})
	if !errors.Is(err, boom) {
		t.Fatalf("Apply with batches failing: %v, want %v", err, boom)
	}
	if n := len(r.kernel.Table()); n != 0 {
		t.Fatalf("kernel holds %d services after batches that failed, want 0", n)
	}
	r.kernel.SetError(ipvstest.OpBatch, nil)
	// An incremental update: the failure made the dataplane read the
	// kernel again, and the whole plan is diffed.
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Changed: []model.ServiceKey{svcDNS}}); err != nil {
		t.Fatal(err)
	}
	if n := len(r.kernel.Table()); n != 3 {
		t.Errorf("kernel holds %d services, want 3", n)
	}
}
