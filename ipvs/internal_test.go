package ipvs_test

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/ipvs/ipvstest"
)

var (
	lbWeb  = model.VirtualServiceKey{Addr: netip.MustParseAddr("198.51.100.1"), Port: 80, Protocol: model.TCP}
	eipDNS = model.VirtualServiceKey{Addr: netip.MustParseAddr("203.0.113.1"), Port: 53, Protocol: model.UDP}
)

// localPlan is two Services with a Local frontend each whose only
// endpoints run elsewhere (no Destinations) and whose in-cluster traffic
// goes to internal.
func localPlan(web, dns []model.Destination) *model.Plan {
	p := &model.Plan{Services: map[model.ServiceKey]*model.ServicePlan{
		svcWeb: {Key: svcWeb, VirtualServices: []model.VirtualService{
			{VirtualServiceKey: lbWeb, Kind: model.FrontendLoadBalancer, Local: true, Internal: web},
		}},
		svcDNS: {Key: svcDNS, VirtualServices: []model.VirtualService{
			{VirtualServiceKey: eipDNS, Kind: model.FrontendExternalIP, Local: true, Internal: dns},
		}},
	}}
	return p
}

// TestDataplaneInternalServices: a Local frontend with in-cluster
// destinations gets a firewall-mark service holding them, under a mark
// the firewall table records with the frontend; the mark stays while the
// frontend keeps an internal set (endpoint changes, restarts), is not
// handed to another frontend right after it was freed, and the services
// go with the plan.
func TestDataplaneInternalServices(t *testing.T) {
	r := newRig()
	fw := &ipvstest.FakeFirewall{}
	newDP := func() *ipvs.Dataplane {
		dp := r.plainDataplane(t, func(c *ipvs.Config) { c.Conntrack = r.ct; c.Firewall = fw })
		return dp
	}
	web := []model.Destination{be("10.244.2.2", 8080, 1)}
	dns := []model.Destination{be("10.244.3.2", 8080, 1)}
	mark1, mark2, mark3 := ipvs.MarkKey(1, false), ipvs.MarkKey(2, false), ipvs.MarkKey(3, false)
	// Services are planned in ServiceKey order: default/web first.
	lastSpec := func() ipvs.FirewallSpec {
		specs := fw.Specs()
		return specs[len(specs)-1]
	}
	check := func(step string, wantTable []ipvstest.Entry, wantInternal []ipvs.InternalMark) {
		t.Helper()
		if diff := cmp.Diff(wantTable, r.kernel.Table(), cmpAddrs); diff != "" {
			t.Errorf("%s: kernel table (-want +got):\n%s", step, diff)
		}
		if diff := cmp.Diff(wantInternal, lastSpec().Internal, cmpAddrs); diff != "" {
			t.Errorf("%s: firewall internal marks (-want +got):\n%s", step, diff)
		}
		// Only frontends are bound; a mark service has no address.
		if diff := cmp.Diff([]netip.Addr{lbWeb.Addr, eipDNS.Addr}, r.bound(t), cmpAddrs); diff != "" {
			t.Errorf("%s: addresses on switchyard0 (-want +got):\n%s", step, diff)
		}
	}

	dp := newDP()
	if err := dp.Apply(t.Context(), plugin.Update{Plan: localPlan(web, dns), Full: true}); err != nil {
		t.Fatal(err)
	}
	check("first apply", []ipvstest.Entry{
		entry(rr(mark1), dstState("10.244.2.2", 1, 0, 0)),
		entry(rr(mark2), dstState("10.244.3.2", 1, 0, 0)),
		entry(rr(lbWeb)),
		entry(rr(eipDNS)),
	}, []ipvs.InternalMark{{Key: lbWeb, Mark: 1}, {Key: eipDNS, Mark: 2}})
	// The mark services live on no address of the dummy: the table's
	// owned set is their proof of ownership.
	if st, _ := fw.Load(); !cmp.Equal(st.Owned, []model.VirtualServiceKey{mark1, mark2}, cmpAddrs) {
		t.Errorf("owned keys recorded = %v, want the mark services %v", st.Owned, []model.VirtualServiceKey{mark1, mark2})
	}
	stats, err := dp.Stats([]model.VirtualServiceKey{lbWeb, eipDNS, mark1})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := stats[mark1]; ok || len(stats) != 2 {
		t.Errorf("Stats keys = %v, want the two frontends only", stats)
	}

	// An endpoint joins web's internal set: same mark, one destination
	// added, nothing re-created.
	adds := r.kernel.Calls(ipvstest.OpAddService)
	web2 := []model.Destination{be("10.244.2.2", 8080, 1), be("10.244.2.3", 8080, 1)}
	if err := dp.Apply(t.Context(), plugin.Update{Plan: localPlan(web2, dns), Changed: []model.ServiceKey{svcWeb}}); err != nil {
		t.Fatal(err)
	}
	if n := r.kernel.Calls(ipvstest.OpAddService) - adds; n != 0 {
		t.Errorf("an endpoint change added %d services, want 0", n)
	}
	check("endpoint added", []ipvstest.Entry{
		entry(rr(mark1), dstState("10.244.2.2", 1, 0, 0), dstState("10.244.2.3", 1, 0, 0)),
		entry(rr(mark2), dstState("10.244.3.2", 1, 0, 0)),
		entry(rr(lbWeb)),
		entry(rr(eipDNS)),
	}, []ipvs.InternalMark{{Key: lbWeb, Mark: 1}, {Key: eipDNS, Mark: 2}})

	// web loses its internal set (no endpoint left anywhere): its mark
	// service goes. Back with one, it gets a mark never used since.
	if err := dp.Apply(t.Context(), plugin.Update{Plan: localPlan(nil, dns), Changed: []model.ServiceKey{svcWeb}}); err != nil {
		t.Fatal(err)
	}
	check("internal set gone", []ipvstest.Entry{
		entry(rr(mark2), dstState("10.244.3.2", 1, 0, 0)),
		entry(rr(lbWeb)),
		entry(rr(eipDNS)),
	}, []ipvs.InternalMark{{Key: eipDNS, Mark: 2}})
	if err := dp.Apply(t.Context(), plugin.Update{Plan: localPlan(web, dns), Changed: []model.ServiceKey{svcWeb}}); err != nil {
		t.Fatal(err)
	}
	wantBack := []ipvstest.Entry{
		entry(rr(mark2), dstState("10.244.3.2", 1, 0, 0)),
		entry(rr(mark3), dstState("10.244.2.2", 1, 0, 0)),
		entry(rr(lbWeb)),
		entry(rr(eipDNS)),
	}
	wantMarks := []ipvs.InternalMark{{Key: lbWeb, Mark: 3}, {Key: eipDNS, Mark: 2}}
	check("internal set back", wantBack, wantMarks)

	// A restart keeps every mark: nothing changes in the kernel or the
	// table, even though a fresh Dataplane would hand out 1 and 2.
	before, syncs := r.mutations(), len(fw.Specs())
	dp = newDP()
	if err := dp.Apply(t.Context(), plugin.Update{Plan: localPlan(web, dns), Full: true}); err != nil {
		t.Fatal(err)
	}
	if n := r.mutations() - before; n != 0 {
		t.Errorf("restart with an unchanged plan made %d kernel changes, want 0", n)
	}
	if n := len(fw.Specs()) - syncs; n != 0 {
		t.Errorf("restart with an unchanged plan rewrote the table %d times, want 0", n)
	}
	check("after restart", wantBack, wantMarks)

	// Everything deleted: the mark services go with their frontends, and
	// their ownership records after them.
	if err := dp.Apply(t.Context(), plugin.Update{Plan: &model.Plan{}, Full: true}); err != nil {
		t.Fatal(err)
	}
	if got := r.kernel.Table(); len(got) != 0 {
		t.Errorf("kernel table after deleting everything = %v, want empty", got)
	}
	if st, _ := fw.Load(); len(st.Owned) != 0 || len(st.Internal) != 0 {
		t.Errorf("table after deleting everything records owned %v, internal %v; want none", st.Owned, st.Internal)
	}
}

// TestDataplaneInternalUDPDrain: a UDP frontend's internal service drains
// a removed endpoint as the frontend would (only active flows count) and
// deletes its conntrack entries by the frontend's address and port.
func TestDataplaneInternalUDPDrain(t *testing.T) {
	r := newRig()
	dp := r.dataplane(t)
	web := []model.Destination{be("10.244.2.2", 8080, 1)}
	dns := []model.Destination{be("10.244.3.2", 8080, 1), be("10.244.3.3", 8080, 1)}
	if err := dp.Apply(t.Context(), plugin.Update{Plan: localPlan(web, dns), Full: true}); err != nil {
		t.Fatal(err)
	}
	mark2 := ipvs.MarkKey(2, false)
	// The removed endpoint has an inactive flow, as IPVS counts UDP.
	if err := r.kernel.SetConns(mark2, ipvs.DestinationKey{Addr: netip.MustParseAddr("10.244.3.3"), Port: 8080}, 0, 1); err != nil {
		t.Fatal(err)
	}
	before := len(r.ct.Deletions())
	if err := dp.Apply(t.Context(), plugin.Update{Plan: localPlan(web, dns[:1]), Changed: []model.ServiceKey{svcDNS}}); err != nil {
		t.Fatal(err)
	}
	if n := dp.Draining(); n != 0 {
		t.Errorf("%d destinations still draining, want the UDP one deleted at once", n)
	}
	want := []ipvstest.ConntrackDeletion{{VIP: eipDNS.Addr, Port: eipDNS.Port, Backend: netip.MustParseAddr("10.244.3.3")}}
	if diff := cmp.Diff(want, r.ct.Deletions()[before:], cmpAddrs); diff != "" {
		t.Errorf("conntrack deletions (-want +got):\n%s", diff)
	}
}
