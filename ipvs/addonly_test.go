package ipvs_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/ipvs/ipvstest"
)

func TestAddOnly(t *testing.T) {
	bind := ipvs.Op{Kind: ipvs.OpBindAddr, Addr: vipA}
	add := ipvs.Op{Kind: ipvs.OpAddService, Service: rr(keyA)}
	update := ipvs.Op{Kind: ipvs.OpUpdateService, Service: ipvs.Service{VirtualServiceKey: keyA, Scheduler: "wrr"}}
	addDest := ipvs.Op{Kind: ipvs.OpAddDestination, Service: keyOnly(keyA), Dest: dst("10.244.1.2", 1)}
	addDestZero := ipvs.Op{Kind: ipvs.OpAddDestination, Service: keyOnly(keyA), Dest: dst("10.244.1.3", 0)}
	raise := ipvs.Op{Kind: ipvs.OpUpdateDestination, Service: keyOnly(keyA), Dest: dst("10.244.2.2", 3)}
	toZero := ipvs.Op{Kind: ipvs.OpUpdateDestination, Service: keyOnly(keyA), Dest: dst("10.244.2.3", 0)}
	drain := ipvs.Op{Kind: ipvs.OpDrainDestination, Service: keyOnly(keyA), Dest: dst("10.244.2.4", 1)}
	del := ipvs.Op{Kind: ipvs.OpDeleteService, Service: keyOnly(keyB)}
	unbind := ipvs.Op{Kind: ipvs.OpUnbindAddr, Addr: vipB}

	tests := []struct {
		name string
		ops  []ipvs.Op
		want []ipvs.Op
	}{
		{name: "nothing", ops: nil, want: []ipvs.Op{}},
		{
			name: "adds and updates stay, in order",
			ops:  []ipvs.Op{bind, add, update, addDest, addDestZero, raise},
			want: []ipvs.Op{bind, add, update, addDest, addDestZero, raise},
		},
		{
			name: "removals and drains go",
			ops:  []ipvs.Op{bind, add, addDest, raise, toZero, drain, del, unbind},
			want: []ipvs.Op{bind, add, addDest, raise},
		},
		{name: "only removals", ops: []ipvs.Op{toZero, drain, del, unbind}, want: []ipvs.Op{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]ipvs.Op(nil), tt.ops...)
			if diff := cmp.Diff(tt.want, ipvs.AddOnly(in), cmpAddrs); diff != "" {
				t.Errorf("AddOnly (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.ops, in, cmpAddrs); diff != "" {
				t.Errorf("AddOnly changed its input (-was +now):\n%s", diff)
			}
		})
	}
}

// TestDataplaneApplyAddOnly is a restart whose caches still list: the
// kernel and the firewall table hold the previous daemon's state, and a
// partial plan applied add-only adds and raises but deletes, unbinds,
// drains and lowers to 0 nothing, foreign or stale or owned, and leaves
// the table's elements alone. The full Apply after the caches synced
// prunes as always.
func TestDataplaneApplyAddOnly(t *testing.T) {
	r, foreign := newNodeRig(t)
	fw := &ipvstest.FakeFirewall{}
	newDP := func() *ipvs.Dataplane {
		dp, err := ipvs.New(ipvs.Config{
			Kernel: r.kernel, Addresses: r.addrs, Sysctls: r.sysctls, Conntrack: r.ct, Firewall: fw,
			DrainTimeout: time.Minute, Now: r.clock.Now,
		})
		if err != nil {
			t.Fatal(err)
		}
		return dp
	}
	svcOld := model.ServiceKey{Namespace: "default", Name: "old"}
	old := &model.ServicePlan{Key: svcOld, VirtualServices: []model.VirtualService{
		{VirtualServiceKey: keyB, Kind: model.FrontendClusterIP, Destinations: []model.Destination{be("10.244.9.9", 8080, 1)}},
	}}
	before := webPlan(be("10.244.1.2", 8080, 1), be("10.244.2.2", 8080, 2))
	before.Services[svcOld] = old
	delete(before.Services, svcDNS)
	if err := newDP().Apply(t.Context(), plugin.Update{Plan: before, Full: true}); err != nil {
		t.Fatalf("the previous daemon's Apply: %v", err)
	}
	fwBefore := fw.Specs()

	// The restart: web's slices half listed (10.244.2.2 missing, a new
	// 10.244.3.2, 10.244.1.2 raised to 3), its NodePort not planned yet,
	// the DNS Service new, the old one not listed (yet, or ever).
	partial := webPlan(be("10.244.1.2", 8080, 3), be("10.244.3.2", 8080, 1))
	partial.Services[svcWeb].VirtualServices = partial.Services[svcWeb].VirtualServices[:1]
	dp := newDP()
	if err := dp.ApplyAddOnly(t.Context(), plugin.Update{Plan: partial, Changed: []model.ServiceKey{svcDNS, svcWeb}}); err != nil {
		t.Fatalf("ApplyAddOnly: %v", err)
	}
	oldEntry := entry(rr(keyB), dstState("10.244.9.9", 1, 0, 0))
	webBefore := []ipvs.DestinationState{dstState("10.244.1.2", 1, 0, 0), dstState("10.244.2.2", 2, 0, 0)}
	dns := entry(ipvs.Service{VirtualServiceKey: keyA53, Scheduler: "mh", Flags: ipvs.FlagSchedOpt2},
		dstState("10.244.1.3", 1, 0, 0), dstState("10.244.2.3", 1, 0, 0))
	want := []ipvstest.Entry{
		dns,
		entry(rr(keyA), dstState("10.244.1.2", 3, 0, 0), dstState("10.244.2.2", 2, 0, 0), dstState("10.244.3.2", 1, 0, 0)),
		oldEntry,
		entry(foreign),
		entry(ipvs.Service{VirtualServiceKey: keyNP, Scheduler: "wrr"}, webBefore...),
	}
	if diff := cmp.Diff(want, r.kernel.Table(), cmpAddrs); diff != "" {
		t.Errorf("kernel table after the add-only apply (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]netip.Addr{vipA, vipB}, r.bound(t), cmpAddrs); diff != "" {
		t.Errorf("addresses on switchyard0 after the add-only apply (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(fwBefore, fw.Specs(), cmpAddrs); diff != "" {
		t.Errorf("firewall table written by the add-only apply (-before +after):\n%s", diff)
	}
	if n := dp.Draining(); n != 0 {
		t.Errorf("%d real servers draining after the add-only apply, want 0", n)
	}

	// The caches synced: the whole plan, in full, prunes.
	whole := webPlan(be("10.244.1.2", 8080, 3), be("10.244.3.2", 8080, 1))
	if err := dp.Apply(t.Context(), plugin.Update{Plan: whole, Full: true}); err != nil {
		t.Fatalf("full Apply: %v", err)
	}
	webNow := []ipvs.DestinationState{dstState("10.244.1.2", 3, 0, 0), dstState("10.244.3.2", 1, 0, 0)}
	want = []ipvstest.Entry{
		dns,
		entry(rr(keyA), webNow...), // 10.244.2.2 had no connections: drained and deleted
		entry(foreign),
		entry(ipvs.Service{VirtualServiceKey: keyNP, Scheduler: "wrr"}, webNow...),
	}
	if diff := cmp.Diff(want, r.kernel.Table(), cmpAddrs); diff != "" {
		t.Errorf("kernel table after the full apply (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]netip.Addr{vipA}, r.bound(t), cmpAddrs); diff != "" {
		t.Errorf("addresses on switchyard0 after the full apply (-want +got):\n%s", diff)
	}
	specs := fw.Specs()
	if len(specs) == len(fwBefore) {
		t.Fatalf("the full apply did not write the firewall table")
	}
	last := specs[len(specs)-1]
	if diff := cmp.Diff([]netip.Addr{vipA}, last.ClusterIPs, cmpAddrs); diff != "" {
		t.Errorf("firewall ClusterIPs after the full apply (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]model.VirtualServiceKey{keyNP}, last.Owned, cmpAddrs); diff != "" {
		t.Errorf("firewall owned keys after the full apply (-want +got):\n%s", diff)
	}
}
