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

func TestBuildFirewallSpec(t *testing.T) {
	lbCluster := netip.MustParseAddr("192.0.2.1")
	lbLocal := netip.MustParseAddr("192.0.2.2")
	cidrs := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}
	ds := func(addr netip.Addr, kind model.FrontendKind, local bool) ipvs.DesiredService {
		return ipvs.DesiredService{Service: rr(model.VirtualServiceKey{Addr: addr, Port: 80, Protocol: model.TCP}), Kind: kind, Local: local}
	}
	keyNPLocal := model.VirtualServiceKey{Addr: nodeIP, Port: 30081, Protocol: model.UDP}
	lbLocalKey := model.VirtualServiceKey{Addr: lbLocal, Port: 80, Protocol: model.TCP}
	ranges := []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}
	local := ds(lbLocal, model.FrontendLoadBalancer, true)
	local.SourceRanges = ranges
	want := ipvs.Desired{Services: map[model.VirtualServiceKey]ipvs.DesiredService{
		keyA:  ds(vipA, model.FrontendClusterIP, false),
		keyB:  ds(vipB, model.FrontendClusterIP, false),
		keyNP: ds(nodeIP, model.FrontendNodePort, false),
		{Addr: lbCluster, Port: 80, Protocol: model.TCP}: ds(lbCluster, model.FrontendLoadBalancer, false),
		lbLocalKey: local,
		keyNPLocal: ds(nodeIP, model.FrontendNodePort, true),
	}}
	tests := []struct {
		name string
		all  bool
		want ipvs.FirewallSpec
	}{
		{name: "cluster CIDRs", want: ipvs.FirewallSpec{
			ClusterIPs: []netip.Addr{vipA, vipB}, ExternalIPs: []netip.Addr{lbCluster}, ClusterCIDRs: cidrs,
			NodePorts:    []model.VirtualServiceKey{keyNP},
			SourceRanges: []ipvs.SourceRange{{Key: lbLocalKey, Ranges: ranges}},
		}},
		{name: "masqueradeAll takes Local too", all: true, want: ipvs.FirewallSpec{
			ClusterIPs: []netip.Addr{vipA, vipB}, ExternalIPs: []netip.Addr{lbCluster, lbLocal}, ClusterCIDRs: cidrs, MasqueradeAll: true,
			NodePorts:    []model.VirtualServiceKey{keyNP, keyNPLocal},
			SourceRanges: []ipvs.SourceRange{{Key: lbLocalKey, Ranges: ranges}},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ipvs.BuildFirewallSpec(want, cidrs, tc.all)
			if diff := cmp.Diff(tc.want, got, cmpAddrs); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestDataplaneSyncsFirewallOnChange(t *testing.T) {
	r := newRig()
	fw := &ipvstest.FakeFirewall{}
	dp, err := ipvs.New(ipvs.Config{Kernel: r.kernel, Addresses: r.addrs, Sysctls: r.sysctls, Firewall: fw})
	if err != nil {
		t.Fatal(err)
	}
	plan := webPlan(be("10.244.1.2", 8080, 1))
	steps := []struct {
		name   string
		update plugin.Update
		change func()
		syncs  int
	}{
		{name: "first full apply", update: plugin.Update{Plan: plan, Full: true}, syncs: 1},
		{name: "endpoint change: same addresses", update: plugin.Update{Plan: plan, Changed: []model.ServiceKey{svcWeb}},
			change: func() { plan.Services[svcWeb].VirtualServices[0].Destinations = nil }, syncs: 1},
		{name: "UDP service gone: the address stays for web", update: plugin.Update{Plan: plan, Changed: []model.ServiceKey{svcDNS}},
			change: func() { delete(plan.Services, svcDNS) }, syncs: 1},
		{name: "address gone with the last service", update: plugin.Update{Plan: plan, Changed: []model.ServiceKey{svcWeb}},
			change: func() { delete(plan.Services, svcWeb) }, syncs: 2},
		{name: "full resync rewrites the table", update: plugin.Update{Plan: plan, Full: true}, syncs: 3},
	}
	for _, st := range steps {
		if st.change != nil {
			st.change()
		}
		if err := dp.Apply(t.Context(), st.update); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if got := len(fw.Specs()); got != st.syncs {
			t.Errorf("%s: %d syncs, want %d", st.name, got, st.syncs)
		}
	}
	specs := fw.Specs()
	if diff := cmp.Diff([]netip.Addr{vipA}, specs[0].ClusterIPs, cmpAddrs); diff != "" {
		t.Errorf("first spec's cluster IPs (-want +got):\n%s", diff)
	}
	if got := specs[len(specs)-1].ClusterIPs; len(got) != 0 {
		t.Errorf("last spec's cluster IPs = %v, want none", got)
	}
}
