package ipvs_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/ipvs/ipvstest"
)

// plainDataplane is a Dataplane over the rig's kernel, addresses and
// sysctls only (no conntrack, strict ARP or drain timeout, unlike
// dataplane), with set's changes to its config.
func (r *rig) plainDataplane(t testing.TB, set func(*ipvs.Config)) *ipvs.Dataplane {
	t.Helper()
	c := ipvs.Config{Kernel: r.kernel, Addresses: r.addrs, Sysctls: r.sysctls}
	set(&c)
	dp, err := ipvs.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return dp
}

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
	// Endpoints feed the hairpin set, deduplicated across services.
	ep1, ep2 := netip.MustParseAddr("10.244.1.2"), netip.MustParseAddr("10.244.2.2")
	cipA := ds(vipA, model.FrontendClusterIP, false)
	cipA.Destinations = []ipvs.Destination{{DestinationKey: ipvs.DestinationKey{Addr: ep2, Port: 8080}, Weight: 1}}
	local.Destinations = []ipvs.Destination{
		{DestinationKey: ipvs.DestinationKey{Addr: ep1, Port: 8080}, Weight: 1},
		{DestinationKey: ipvs.DestinationKey{Addr: ep2, Port: 8080}, Weight: 1},
	}
	// The internal (firewall-mark) service of lbLocal's in-cluster
	// traffic: an Internal mark, its endpoints in the hairpin set, its
	// key's address in no set.
	ep3 := netip.MustParseAddr("10.244.3.2")
	markSvc := ds(ipvs.MarkKey(7, false).Addr, model.FrontendLoadBalancer, false)
	markSvc.Service.VirtualServiceKey = ipvs.MarkKey(7, false)
	markSvc.For = lbLocalKey
	markSvc.Destinations = []ipvs.Destination{{DestinationKey: ipvs.DestinationKey{Addr: ep3, Port: 8080}, Weight: 1}}
	internal := []ipvs.InternalMark{{Key: lbLocalKey, Mark: 7}}
	endpoints := []netip.Addr{ep1, ep2, ep3}
	want := ipvs.Desired{Services: map[model.VirtualServiceKey]ipvs.DesiredService{
		keyA:  cipA,
		keyB:  ds(vipB, model.FrontendClusterIP, false),
		keyNP: ds(nodeIP, model.FrontendNodePort, false),
		{Addr: lbCluster, Port: 80, Protocol: model.TCP}: ds(lbCluster, model.FrontendLoadBalancer, false),
		lbLocalKey:             local,
		keyNPLocal:             ds(nodeIP, model.FrontendNodePort, true),
		ipvs.MarkKey(7, false): markSvc,
	}}
	tests := []struct {
		name string
		all  bool
		want ipvs.FirewallSpec
	}{
		{name: "cluster CIDRs", want: ipvs.FirewallSpec{
			ClusterIPs: []netip.Addr{vipA, vipB}, ExternalIPs: []netip.Addr{lbCluster}, Local: ipvs.LocalDetector{CIDRs: cidrs},
			NodePorts:    []model.VirtualServiceKey{keyNP},
			SourceRanges: []ipvs.SourceRange{{Key: lbLocalKey, Ranges: ranges}}, Endpoints: endpoints,
			Internal: internal,
		}},
		{name: "masqueradeAll takes Local too", all: true, want: ipvs.FirewallSpec{
			ClusterIPs: []netip.Addr{vipA, vipB}, ExternalIPs: []netip.Addr{lbCluster, lbLocal}, Local: ipvs.LocalDetector{CIDRs: cidrs}, MasqueradeAll: true,
			NodePorts:    []model.VirtualServiceKey{keyNP, keyNPLocal},
			SourceRanges: []ipvs.SourceRange{{Key: lbLocalKey, Ranges: ranges}}, Endpoints: endpoints,
			Internal: internal,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ipvs.BuildFirewallSpec(want, ipvs.LocalDetector{CIDRs: cidrs}, tc.all)
			if diff := cmp.Diff(tc.want, got, cmpAddrs, cmpopts.EquateComparable(netip.Prefix{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestFirewallSpecStamp(t *testing.T) {
	base := ipvs.FirewallSpec{ClusterIPs: []netip.Addr{vipA}, NodePorts: []model.VirtualServiceKey{keyNP}}
	for _, tc := range []struct {
		name   string
		change func(*ipvs.FirewallSpec)
	}{
		{"cluster IPs", func(s *ipvs.FirewallSpec) { s.ClusterIPs = append(s.ClusterIPs, vipB) }},
		{"external IPs", func(s *ipvs.FirewallSpec) { s.ExternalIPs = []netip.Addr{vipB} }},
		{"node ports", func(s *ipvs.FirewallSpec) { s.NodePorts = nil }},
		{"local CIDRs", func(s *ipvs.FirewallSpec) { s.Local.CIDRs = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")} }},
		{"local interface", func(s *ipvs.FirewallSpec) { s.Local.Interface = "cni0" }},
		{"local interface prefix", func(s *ipvs.FirewallSpec) { s.Local.InterfacePrefix = "veth" }},
		{"masquerade all", func(s *ipvs.FirewallSpec) { s.MasqueradeAll = true }},
		{"source ranges", func(s *ipvs.FirewallSpec) {
			s.SourceRanges = []ipvs.SourceRange{{Key: keyA, Ranges: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}}
		}},
		{"endpoints", func(s *ipvs.FirewallSpec) { s.Endpoints = []netip.Addr{vipB} }},
		{"internal marks", func(s *ipvs.FirewallSpec) { s.Internal = []ipvs.InternalMark{{Key: keyA, Mark: 1}} }},
	} {
		changed := base
		tc.change(&changed)
		if base.Stamp() == changed.Stamp() {
			t.Errorf("changing %s keeps the stamp", tc.name)
		}
	}
	same := ipvs.FirewallSpec{ClusterIPs: []netip.Addr{vipA}, NodePorts: []model.VirtualServiceKey{keyNP}}
	if base.Stamp() != same.Stamp() {
		t.Error("equal specs have different stamps")
	}
	// The owned keys are a journal that RecordOwned writes outside the
	// stamp: they make specs differ, not stamps.
	owned := base
	owned.Owned = []model.VirtualServiceKey{keyNP}
	if base.Stamp() != owned.Stamp() {
		t.Error("changing the owned keys changes the stamp")
	}
}

func TestDataplaneSyncsFirewallOnChange(t *testing.T) {
	r := newRig()
	fw := &ipvstest.FakeFirewall{}
	dp := r.plainDataplane(t, func(c *ipvs.Config) { c.Firewall = fw })
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
			change: func() { delete(plan.Services, svcDNS) }, syncs: 2}, // its endpoints leave the hairpin set
		{name: "address gone with the last service", update: plugin.Update{Plan: plan, Changed: []model.ServiceKey{svcWeb}},
			change: func() { delete(plan.Services, svcWeb) }, syncs: 3},
		{name: "full resync of an unchanged table writes nothing", update: plugin.Update{Plan: plan, Full: true}, syncs: 3},
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

// TestDataplaneRestartKeepsFirewall restarts the dataplane over the same
// kernel: an unchanged table is not rewritten, a deleted one is.
func TestDataplaneRestartKeepsFirewall(t *testing.T) {
	r := newRig()
	fw := &ipvstest.FakeFirewall{}
	newDP := func() *ipvs.Dataplane {
		dp := r.plainDataplane(t, func(c *ipvs.Config) {
			c.Firewall, c.Local.CIDRs = fw, []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}
		})
		return dp
	}
	plan := webPlan(be("10.244.1.2", 8080, 1))
	if err := newDP().Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatal(err)
	}
	if got := len(fw.Specs()); got != 1 {
		t.Fatalf("first apply: %d syncs, want 1", got)
	}
	if err := newDP().Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatal(err)
	}
	if got := len(fw.Specs()); got != 1 {
		t.Errorf("restart with the same plan: %d syncs, want still 1", got)
	}
	fw.DeleteTable()
	dp := newDP()
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatal(err)
	}
	if got := len(fw.Specs()); got != 2 {
		t.Errorf("restart after the table was deleted: %d syncs, want 2", got)
	}
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatal(err)
	}
	if got := len(fw.Specs()); got != 2 {
		t.Errorf("second full resync: %d syncs, want still 2", got)
	}
}

// TestDataplaneRestartRemembersNodePorts restarts the dataplane with a
// plan that no longer wants its NodePort: the table's owned set lets the
// new Dataplane delete it, while a foreign service on the node address
// stays.
func TestDataplaneRestartRemembersNodePorts(t *testing.T) {
	for _, withFirewall := range []bool{true, false} {
		t.Run(fmt.Sprintf("firewall=%t", withFirewall), func(t *testing.T) {
			r := newRig()
			foreign := ipvs.Service{VirtualServiceKey: model.VirtualServiceKey{Addr: nodeIP, Port: 9999, Protocol: model.TCP}, Scheduler: "rr"}
			if err := r.kernel.AddService(foreign); err != nil {
				t.Fatal(err)
			}
			fw := &ipvstest.FakeFirewall{}
			newDP := func() *ipvs.Dataplane {
				cfg := ipvs.Config{Kernel: r.kernel, Addresses: r.addrs, Sysctls: r.sysctls}
				if withFirewall {
					cfg.Firewall = fw
				}
				dp, err := ipvs.New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				return dp
			}
			plan := webPlan(be("10.244.1.2", 8080, 1))
			if err := newDP().Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
				t.Fatal(err)
			}
			// The restarted daemon's plan has the ClusterIP but no NodePort.
			plan.Services[svcWeb].VirtualServices = plan.Services[svcWeb].VirtualServices[:1]
			if err := newDP().Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
				t.Fatal(err)
			}
			var got []model.VirtualServiceKey
			for _, e := range r.kernel.Table() {
				got = append(got, e.Service.VirtualServiceKey)
			}
			want := []model.VirtualServiceKey{keyA, keyA53, foreign.VirtualServiceKey}
			if !withFirewall {
				want = append(want, keyNP) // nothing remembers it: kept, as before
			}
			less := func(a, b model.VirtualServiceKey) bool { return a.Compare(b) < 0 }
			if diff := cmp.Diff(want, got, cmpAddrs, cmpopts.SortSlices(less)); diff != "" {
				t.Errorf("kernel services after the restart (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDataplaneFirewallDelta changes Services one at a time: the table
// takes only element updates, and always ends as a table written whole
// from the same plan; a full resync repairs elements removed or added
// behind the dataplane's back.
func TestDataplaneFirewallDelta(t *testing.T) {
	r := newRig()
	fw := &ipvstest.FakeFirewall{}
	dp := r.plainDataplane(t, func(c *ipvs.Config) { c.Firewall = fw })
	plan := benchPlan(20)
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatal(err)
	}
	key := func(i int) model.ServiceKey {
		return model.ServiceKey{Namespace: "bench", Name: fmt.Sprintf("svc%d", i)}
	}
	wantTable := func() ipvs.FirewallState { return freshTable(t, plan) }
	other := benchPlan(21).Services[key(20)]
	steps := []struct {
		name   string
		change func() model.ServiceKey
	}{
		{"an endpoint moves", func() model.ServiceKey {
			plan.Services[key(3)].VirtualServices[0].Destinations[0].Addr = netip.MustParseAddr("10.250.0.1")
			return key(3)
		}},
		{"a Service goes", func() model.ServiceKey { delete(plan.Services, key(7)); return key(7) }},
		{"a Service comes", func() model.ServiceKey { plan.Services[key(20)] = other; return key(20) }},
		{"a Service loses its endpoints", func() model.ServiceKey {
			plan.Services[key(10)].VirtualServices[0].Destinations = nil
			return key(10)
		}},
	}
	writes := len(fw.Specs())
	for _, st := range steps {
		k := st.change()
		if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Changed: []model.ServiceKey{k}}); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		got, err := fw.Load()
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(wantTable(), got, cmpAddrs); diff != "" {
			t.Errorf("%s: table (-want +got):\n%s", st.name, diff)
		}
		if writes++; len(fw.Specs()) != writes {
			t.Errorf("%s: %d table writes, want %d", st.name, len(fw.Specs()), writes)
		}
	}

	fw.Tamper(func(s *ipvs.FirewallSpec) { s.Endpoints = s.Endpoints[1:] })
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatal(err)
	}
	got, err := fw.Load()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantTable(), got, cmpAddrs); diff != "" {
		t.Errorf("full resync after an element was removed: table (-want +got):\n%s", diff)
	}
}

// TestLocalDetectorMatches covers the local detector's plan, per family:
// prefixes of the family only (masked), interfaces for both families,
// nothing for a family the detector cannot tell.
func TestLocalDetectorMatches(t *testing.T) {
	cmpPrefixes := cmp.Options{cmpopts.EquateComparable(netip.Prefix{}), cmpopts.EquateEmpty()}
	p := netip.MustParsePrefix
	dual := ipvs.LocalDetector{CIDRs: []netip.Prefix{p("10.244.1.0/24"), p("fd00:244:1::/64"), p("10.245.0.7/16")}}
	for _, tc := range []struct {
		name  string
		det   ipvs.LocalDetector
		want4 []ipvs.LocalMatch
		want6 []ipvs.LocalMatch
	}{
		{name: "nothing"},
		{name: "CIDRs of both families, host bits cleared", det: dual,
			want4: []ipvs.LocalMatch{{Source: p("10.244.1.0/24")}, {Source: p("10.245.0.0/16")}},
			want6: []ipvs.LocalMatch{{Source: p("fd00:244:1::/64")}}},
		{name: "IPv4 only: nothing for IPv6", det: ipvs.LocalDetector{CIDRs: []netip.Prefix{p("10.244.0.0/16")}},
			want4: []ipvs.LocalMatch{{Source: p("10.244.0.0/16")}}},
		{name: "bridge", det: ipvs.LocalDetector{Interface: "cni0"},
			want4: []ipvs.LocalMatch{{Interface: "cni0"}}, want6: []ipvs.LocalMatch{{Interface: "cni0"}}},
		{name: "name prefix", det: ipvs.LocalDetector{InterfacePrefix: "veth"},
			want4: []ipvs.LocalMatch{{Interface: "veth", NamePrefix: true}}, want6: []ipvs.LocalMatch{{Interface: "veth", NamePrefix: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want4, tc.det.Matches(true), cmpPrefixes); diff != "" {
				t.Errorf("IPv4 (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want6, tc.det.Matches(false), cmpPrefixes); diff != "" {
				t.Errorf("IPv6 (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNewRefusesLongLocalInterface(t *testing.T) {
	r := newRig()
	_, err := ipvs.New(ipvs.Config{Kernel: r.kernel, Addresses: r.addrs, Sysctls: r.sysctls,
		Local: ipvs.LocalDetector{Interface: "a-name-too-long-x"}})
	if err == nil || !strings.Contains(err.Error(), "longer than 15 bytes") {
		t.Errorf("New with a 17-byte interface = %v, want an error naming its length", err)
	}
}

// TestDataplaneFullResyncSkipsUntouchedTable: a periodic resync reads the
// table only when something may have changed it since the dataplane last
// wrote or read it (UntouchedFirewall), and repairs it then; otherwise a
// change during the resync still goes as a delta, not a rewrite.
func TestDataplaneFullResyncSkipsUntouchedTable(t *testing.T) {
	r := newRig()
	fw := &ipvstest.FakeFirewall{}
	dp := r.plainDataplane(t, func(c *ipvs.Config) { c.Firewall = fw })
	plan := benchPlan(5)
	k := model.ServiceKey{Namespace: "bench", Name: "svc3"}
	full := plugin.Update{Plan: plan, Full: true}
	type counts struct{ Loads, Syncs, Writes int }
	now := func() counts { return counts{fw.Loads(), len(fw.Specs()), fw.Writes()} }
	for _, st := range []struct {
		name   string
		before func()
		update plugin.Update
		// more is what the step adds to the counts.
		more counts
	}{
		{name: "first apply: reads the missing table (for its marks, then its content), writes it", update: full,
			more: counts{Loads: 2, Syncs: 1, Writes: 1}},
		{name: "full resync, table untouched: no read, no write", update: full},
		{name: "full resync with an endpoint moved: no read, one delta", update: plugin.Update{Plan: plan, Full: true, Changed: []model.ServiceKey{k}},
			before: func() { plan.Services[k].VirtualServices[0].Destinations[0].Addr = netip.MustParseAddr("10.250.0.1") },
			more:   counts{Syncs: 1, Writes: 1}},
		{name: "element removed behind its back: read, rewritten", update: full,
			before: func() { fw.Tamper(func(s *ipvs.FirewallSpec) { s.Endpoints = s.Endpoints[1:] }) },
			more:   counts{Loads: 1, Syncs: 1, Writes: 1}},
		{name: "table deleted: read, rewritten", update: full, before: fw.DeleteTable, more: counts{Loads: 1, Syncs: 1, Writes: 1}},
		{name: "then untouched again", update: full},
	} {
		if st.before != nil {
			st.before()
		}
		base := now()
		if err := dp.Apply(t.Context(), st.update); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		got := now()
		got = counts{got.Loads - base.Loads, got.Syncs - base.Syncs, got.Writes - base.Writes}
		if diff := cmp.Diff(st.more, got); diff != "" {
			t.Errorf("%s: counts (-want +got):\n%s", st.name, diff)
		}
		// The test's own read (it counts as the dataplane's for
		// Untouched; the next step tampers after it).
		table, err := fw.Load()
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(freshTable(t, plan), table, cmpAddrs); diff != "" {
			t.Errorf("%s: table (-want +got):\n%s", st.name, diff)
		}
	}
}

// freshTable is the table a fresh dataplane writes for plan.
func freshTable(t *testing.T, plan *model.Plan) ipvs.FirewallState {
	t.Helper()
	fresh := &ipvstest.FakeFirewall{}
	r := newRig()
	dp := r.plainDataplane(t, func(c *ipvs.Config) { c.Firewall = fresh })
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatal(err)
	}
	st, err := fresh.Load()
	if err != nil {
		t.Fatal(err)
	}
	return st
}
