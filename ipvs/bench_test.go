package ipvs_test

import (
	"net/netip"
	"strconv"
	"testing"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/ipvs"
)

// benchPlan is n ClusterIP Services with ten endpoints each.
func benchPlan(n int) *model.Plan {
	p := &model.Plan{Services: make(map[model.ServiceKey]*model.ServicePlan, n)}
	for i := range n {
		k := model.ServiceKey{Namespace: "bench", Name: "svc" + strconv.Itoa(i)}
		vip := netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)})
		dests := make([]model.Destination, 10)
		for j := range dests {
			dests[j] = model.Destination{Addr: netip.AddrFrom4([4]byte{10, 244, byte(i >> 8), byte(i)}), Port: uint16(8000 + j), Weight: 1}
		}
		p.Services[k] = &model.ServicePlan{Key: k, VirtualServices: []model.VirtualService{{
			VirtualServiceKey: model.VirtualServiceKey{Addr: vip, Port: 80, Protocol: model.TCP},
			Kind:              model.FrontendClusterIP, Destinations: dests,
		}}}
	}
	return p
}

// BenchmarkApplyFromScratch programs 10,000 Services (100,000 real
// servers) into an empty fake kernel.
func BenchmarkApplyFromScratch(b *testing.B) {
	plan := benchPlan(10000)
	for b.Loop() {
		b.StopTimer()
		r := newRig()
		dp := r.dataplane(b)
		b.StartTimer()
		if err := dp.Apply(b.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkApplyOneChange changes one endpoint of one of 10,000 Services.
func BenchmarkApplyOneChange(b *testing.B) {
	plan := benchPlan(10000)
	r := newRig()
	dp := r.dataplane(b)
	if err := dp.Apply(b.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		b.Fatal(err)
	}
	k := model.ServiceKey{Namespace: "bench", Name: "svc42"}
	vs := &plan.Services[k].VirtualServices[0]
	before := r.mutations()
	i := 0
	for b.Loop() {
		i++
		vs.Destinations[0].Weight = uint32(1 + i%2)
		if err := dp.Apply(b.Context(), plugin.Update{Plan: plan, Changed: []model.ServiceKey{k}}); err != nil {
			b.Fatal(err)
		}
	}
	if got := r.mutations() - before; got != i {
		b.Fatalf("%d Applies made %d kernel changes, want one each", i, got)
	}
}

// BenchmarkApplyFullUnchanged is a periodic resync of 10,000 unchanged
// Services: it reads the kernel and changes nothing.
func BenchmarkApplyFullUnchanged(b *testing.B) {
	plan := benchPlan(10000)
	r := newRig()
	dp := r.dataplane(b)
	if err := dp.Apply(b.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := dp.Apply(b.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkApplyOneChangeFirewall moves one endpoint of one of 10,000
// Services to a new address, with a firewall table that takes what it is
// given and does nothing: the dataplane's own work for the table (the
// hairpin set's update of two elements).
func BenchmarkApplyOneChangeFirewall(b *testing.B) {
	plan := benchPlan(10000)
	r := newRig()
	fw := &nopFirewall{}
	dp := r.plainDataplane(b, func(c *ipvs.Config) { c.Firewall = fw })
	if err := dp.Apply(b.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		b.Fatal(err)
	}
	k := model.ServiceKey{Namespace: "bench", Name: "svc42"}
	vs := &plan.Services[k].VirtualServices[0]
	i := 0
	for b.Loop() {
		i++
		vs.Destinations[0].Addr = netip.AddrFrom4([4]byte{10, 250, byte(i >> 8), byte(i)})
		if err := dp.Apply(b.Context(), plugin.Update{Plan: plan, Changed: []model.ServiceKey{k}}); err != nil {
			b.Fatal(err)
		}
	}
}

// nopFirewall accepts every write and remembers only the stamp.
type nopFirewall struct{ stamp string }

func (f *nopFirewall) Sync(spec ipvs.FirewallSpec) error { f.stamp = spec.Stamp(); return nil }

func (f *nopFirewall) Update(d ipvs.FirewallDelta) error {
	if d.From != f.stamp {
		return ipvs.ErrNotFound
	}
	f.stamp = d.To
	return nil
}

func (f *nopFirewall) RecordOwned(add, drop []model.VirtualServiceKey) error { return nil }

func (f *nopFirewall) Load() (ipvs.FirewallState, error) {
	return ipvs.FirewallState{Stamp: f.stamp}, nil
}
