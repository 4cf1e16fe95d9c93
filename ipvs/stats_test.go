package ipvs_test

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/ipvs/ipvstest"
)

func TestDataplaneStats(t *testing.T) {
	r := newRig()
	r.addrs.AddLink("eth0", "device")
	if err := r.addrs.AddAddr("eth0", nodeIP); err != nil {
		t.Fatal(err)
	}
	// A foreign service is not the dataplane's: its counters are not read.
	foreign := ipvs.Service{VirtualServiceKey: keyFor, Scheduler: "rr"}
	if err := r.kernel.AddService(foreign); err != nil {
		t.Fatal(err)
	}
	dp := r.dataplane(t)
	if err := dp.Apply(t.Context(), plugin.Update{Plan: webPlan(be("10.244.1.2", 8080, 1), be("10.244.2.2", 8080, 2)), Full: true}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	d1 := ipvs.DestinationKey{Addr: netip.MustParseAddr("10.244.1.2"), Port: 8080}
	d2 := ipvs.DestinationKey{Addr: netip.MustParseAddr("10.244.2.2"), Port: 8080}
	for _, step := range []error{
		r.kernel.SetConns(keyA, d1, 7, 3),
		r.kernel.SetRates(keyA, d1, 12, 3000, 90000),
		r.kernel.SetConns(keyNP, d2, 2, 0),
		r.kernel.SetRates(keyNP, d2, 1<<40, 5, 6), // a rate above 32 bits saturates
	} {
		if step != nil {
			t.Fatal(step)
		}
	}
	before := r.kernel.Calls(ipvstest.OpDestinations)

	got, err := dp.Stats()
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	ap := func(k ipvs.DestinationKey) netip.AddrPort { return netip.AddrPortFrom(k.Addr, k.Port) }
	dns1 := netip.MustParseAddrPort("10.244.1.3:8080")
	dns2 := netip.MustParseAddrPort("10.244.2.3:8080")
	want := map[model.VirtualServiceKey]map[netip.AddrPort]plugin.EndpointStats{
		keyA: {
			ap(d1): {ActiveConns: 7, InactiveConns: 3, ConnRate: 12, BytesInRate: 3000, BytesOutRate: 90000},
			ap(d2): {},
		},
		keyNP: {
			ap(d1): {},
			ap(d2): {ActiveConns: 2, ConnRate: 1<<32 - 1, BytesInRate: 5, BytesOutRate: 6},
		},
		keyA53: {dns1: {}, dns2: {}},
	}
	if diff := cmp.Diff(want, got, cmpAddrs); diff != "" {
		t.Errorf("Stats (-want +got):\n%s", diff)
	}
	if n := r.kernel.Calls(ipvstest.OpDestinations) - before; n != len(want) {
		t.Errorf("Stats dumped %d times, want one dump per owned virtual service (%d)", n, len(want))
	}

	// A failing dump is reported, and leaves the virtual services out.
	boom := errors.New("netlink: boom")
	r.kernel.SetError(ipvstest.OpDestinations, boom)
	got, err = dp.Stats()
	if !errors.Is(err, boom) {
		t.Errorf("Stats error = %v, want %v", err, boom)
	}
	if len(got) != 0 {
		t.Errorf("Stats after failed dumps = %v, want nothing", got)
	}
}
