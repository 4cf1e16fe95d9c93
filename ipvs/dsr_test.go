package ipvs_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plan"
	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/ipvs/ipvstest"
)

// dsrRecorder is a DSRFirewall and DSRTunnels that records its calls.
type dsrRecorder struct {
	plans     []model.DSRPlan
	fallbacks []netip.Addr
	guePorts  []uint16
}

func (r *dsrRecorder) SetDSR(p model.DSRPlan) error { r.plans = append(r.plans, p); return nil }
func (r *dsrRecorder) EnsureFallback(a netip.Addr) error {
	r.fallbacks = append(r.fallbacks, a)
	return nil
}
func (r *dsrRecorder) EnsureGUE(port uint16, v6 bool) error {
	if v6 {
		port |= 1 << 15 // recorded apart: the tests' ports are below 32768
	}
	r.guePorts = append(r.guePorts, port)
	return nil
}

var (
	dsrVIP  = netip.MustParseAddr("192.0.2.10")
	dsrSelf = netip.MustParseAddr("10.0.1.2")
)

func dsrPlan(enc model.Encapsulation, peers ...model.DSRPeer) model.DSRPlan {
	p := model.DSRPlan{Addr: dsrSelf, Encapsulation: enc, Seed: 7, MSS: 1440, Peers: peers,
		Frontends: []model.DSRFrontend{{VirtualServiceKey: model.VirtualServiceKey{Addr: dsrVIP, Port: 80, Protocol: model.TCP}, Slots: []uint32{0, plan.DSRMark(1)}}}}
	if enc == model.GUE {
		p.GUEPort = 6080
	}
	return p
}

// dsrSysctls are the dsr side's sysctls, each still at its default.
func dsrSysctls() *ipvstest.FakeSysctls {
	return ipvstest.NewFakeSysctls(map[string]string{
		"net/ipv4/vs/sloppy_tcp": "0", "net/ipv4/vs/sloppy_sctp": "0", "net/ipv4/vs/schedule_icmp": "0", "net/ipv4/vs/expire_nodest_conn": "0", "net/ipv4/conf/tunl0/rp_filter": "0",
	})
}

func peer(name, addr string, i int) model.DSRPeer {
	return model.DSRPeer{Name: name, Addr: netip.MustParseAddr(addr), Mark: plan.DSRMark(i)}
}

// kernelTable is the fake kernel's services and destinations.
func kernelTable(t *testing.T, k ipvs.Kernel) map[model.VirtualServiceKey][]ipvs.Destination {
	t.Helper()
	svcs, err := k.Services()
	if err != nil {
		t.Fatal(err)
	}
	out := map[model.VirtualServiceKey][]ipvs.Destination{}
	for _, s := range svcs {
		ds, err := k.Destinations(s.VirtualServiceKey)
		if err != nil {
			t.Fatal(err)
		}
		out[s.VirtualServiceKey] = []ipvs.Destination{}
		for _, d := range ds {
			out[s.VirtualServiceKey] = append(out[s.VirtualServiceKey], d.Destination)
		}
	}
	return out
}

// TestDSRApply programs two peers, then a plan where one left and the
// other moved to GUE and another address: the peers' services follow,
// and the services the dsr side does not own (a frontend's own service on
// the same address, an internal firewall-mark service) are left alone.
func TestDSRApply(t *testing.T) {
	k := ipvstest.NewFake()
	addrs := ipvstest.NewFakeAddresses()
	sys := dsrSysctls()
	rec := &dsrRecorder{}
	own := model.VirtualServiceKey{Addr: dsrVIP, Port: 80, Protocol: model.TCP}
	internal := ipvs.MarkKey(5, false)
	for _, k0 := range []model.VirtualServiceKey{own, internal} {
		if err := k.AddService(ipvs.Service{VirtualServiceKey: k0, Scheduler: "rr"}); err != nil {
			t.Fatal(err)
		}
	}
	// A concurrent change interrupting a dump is retried.
	addrs.Interrupt(2)
	d, err := ipvs.NewDSR(ipvs.DSRConfig{Kernel: k, Addresses: addrs, Sysctls: sys, Firewall: rec, Tunnels: rec})
	if err != nil {
		t.Fatal(err)
	}
	ipip := ipvs.Tunnel{Encapsulation: model.IPIP}
	dest := func(addr string, tun ipvs.Tunnel) []ipvs.Destination {
		return []ipvs.Destination{{DestinationKey: ipvs.DestinationKey{Addr: netip.MustParseAddr(addr)}, Weight: 1, Tunnel: tun}}
	}
	for _, step := range []struct {
		name string
		plan model.DSRPlan
		want map[model.VirtualServiceKey][]ipvs.Destination
	}{
		{
			name: "two peers over ipip",
			plan: dsrPlan(model.IPIP, peer("n2", "10.0.2.2", 1), peer("n3", "10.0.3.2", 2)),
			want: map[model.VirtualServiceKey][]ipvs.Destination{
				own: {}, internal: {},
				ipvs.MarkKey(plan.DSRMark(1), false): dest("10.0.2.2", ipip),
				ipvs.MarkKey(plan.DSRMark(2), false): dest("10.0.3.2", ipip),
			},
		},
		{
			name: "n3 gone, n2 over gue at a new address",
			plan: dsrPlan(model.GUE, peer("n2", "10.0.9.2", 1)),
			want: map[model.VirtualServiceKey][]ipvs.Destination{
				own: {}, internal: {},
				ipvs.MarkKey(plan.DSRMark(1), false): dest("10.0.9.2", ipvs.Tunnel{Encapsulation: model.GUE, Port: 6080}),
			},
		},
	} {
		t.Run(step.name, func(t *testing.T) {
			if err := d.Apply(step.plan); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(step.want, kernelTable(t, k), cmpopts.EquateComparable(netip.Addr{})); diff != "" {
				t.Errorf("kernel (-want +got):\n%s", diff)
			}
			got, err := addrs.Addrs(ipvs.DSRDummy)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]netip.Addr{dsrVIP}, got, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
				t.Errorf("%s (-want +got):\n%s", ipvs.DSRDummy, diff)
			}
			if last := rec.plans[len(rec.plans)-1]; last.Encapsulation != step.plan.Encapsulation {
				t.Errorf("firewall got %v, want the plan", last.Encapsulation)
			}
		})
	}
	wantSys := map[string]string{"net/ipv4/vs/sloppy_tcp": "1", "net/ipv4/vs/sloppy_sctp": "1", "net/ipv4/vs/schedule_icmp": "1", "net/ipv4/vs/expire_nodest_conn": "1", "net/ipv4/conf/tunl0/rp_filter": "2"}
	if diff := cmp.Diff(wantSys, sys.Values()); diff != "" {
		t.Errorf("sysctls (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]netip.Addr{dsrSelf, dsrSelf}, rec.fallbacks, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
		t.Errorf("fallback device addresses (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]uint16{6080}, rec.guePorts); diff != "" {
		t.Errorf("GUE ports (-want +got):\n%s", diff)
	}
}

func TestDSRDesiredRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		plan model.DSRPlan
		want string
	}{
		{"internal mark", dsrPlan(model.IPIP, model.DSRPeer{Name: "n2", Addr: netip.MustParseAddr("10.0.2.2"), Mark: 5}), "not a dsr mark"},
		{"mark twice", dsrPlan(model.IPIP, peer("n2", "10.0.2.2", 1), peer("n3", "10.0.3.2", 1)), "given twice"},
		{"no encapsulation", dsrPlan(0), "unknown encapsulation"},
		{"IPv6 node", func() model.DSRPlan { p := dsrPlan(model.IPIP); p.Addr = netip.MustParseAddr("fd00::1"); return p }(), "want IPv4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ipvs.DSRDesired(tc.plan)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

// TestDSRDesiredIPv6: with an IPv6 frontend, each peer with an IPv6
// address gets the same mark's IPv6 service too (ip6ip6 to that
// address); a peer without one (left out of the IPv6 tables) keeps its
// IPv4 service only, and the rest of the plan still applies.
func TestDSRDesiredIPv6(t *testing.T) {
	p := dsrPlan(model.IPIP, peer("n2", "10.0.2.2", 1), peer("n3", "10.0.3.2", 2))
	p.Addr6 = netip.MustParseAddr("fd00::12")
	p.Peers[0].Addr6 = netip.MustParseAddr("fd00::22")
	p.Frontends = append(p.Frontends, model.DSRFrontend{
		VirtualServiceKey: model.VirtualServiceKey{Addr: netip.MustParseAddr("2001:db8::10"), Port: 80, Protocol: model.TCP},
		Slots:             []uint32{0, plan.DSRMark(1)},
	})
	want, err := ipvs.DSRDesired(p)
	if err != nil {
		t.Fatal(err)
	}
	got := map[model.VirtualServiceKey][]string{}
	for k, s := range want.Services {
		for _, d := range s.Destinations {
			got[k] = append(got[k], d.Addr.String())
		}
	}
	if diff := cmp.Diff(map[model.VirtualServiceKey][]string{
		ipvs.MarkKey(plan.DSRMark(1), false): {"10.0.2.2"},
		ipvs.MarkKey(plan.DSRMark(1), true):  {"fd00::22"},
		ipvs.MarkKey(plan.DSRMark(2), false): {"10.0.3.2"},
	}, got, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
		t.Errorf("mark services (-want +got):\n%s", diff)
	}
}

func TestIsDSRMark(t *testing.T) {
	for m, want := range map[uint32]bool{0: false, 5: false, 0x4000: false, plan.DSRMark(0): true, plan.DSRMark(7): true, plan.DSRMark(7) | 1: false} {
		if got := ipvs.IsDSRMark(m); got != want {
			t.Errorf("IsDSRMark(%#x) = %t, want %t", m, got, want)
		}
	}
}

// TestDSRPeerMarks: on a node that never ran the dsr side (no
// switchyard-dsr link) it reads no mark and no error; a DSR opened after
// another one applied a plan (a restarted daemon over the same kernel)
// reads back each peer's mark by its IPv4 and IPv6 tunnel addresses, and
// nothing of the services the dsr side does not own.
func TestDSRPeerMarks(t *testing.T) {
	k := ipvstest.NewFake()
	addrs := ipvstest.NewFakeAddresses()
	sys := dsrSysctls()
	rec := &dsrRecorder{}
	cfg := ipvs.DSRConfig{Kernel: k, Addresses: addrs, Sysctls: sys, Firewall: rec, Tunnels: rec}
	if err := k.AddService(ipvs.Service{VirtualServiceKey: ipvs.MarkKey(5, false), Scheduler: "rr"}); err != nil {
		t.Fatal(err)
	}
	first, err := ipvs.NewDSR(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := first.PeerMarks(); err != nil || len(got) != 0 {
		t.Fatalf("PeerMarks before any apply = %v, %v; want none and no error", got, err)
	}
	p := dsrPlan(model.IPIP, peer("n2", "10.0.2.2", 3), peer("n3", "10.0.3.2", 1))
	p.Addr6 = netip.MustParseAddr("fd00::1:2")
	p.Peers[0].Addr6 = netip.MustParseAddr("fd00::2:2")
	p.Frontends = append(p.Frontends, model.DSRFrontend{
		VirtualServiceKey: model.VirtualServiceKey{Addr: netip.MustParseAddr("2001:db8::10"), Port: 80, Protocol: model.TCP},
		Slots:             []uint32{0, plan.DSRMark(3)},
	})
	if err := first.Apply(p); err != nil {
		t.Fatal(err)
	}
	restarted, err := ipvs.NewDSR(cfg)
	if err != nil {
		t.Fatal(err)
	}
	got, err := restarted.PeerMarks()
	if err != nil {
		t.Fatal(err)
	}
	want := map[netip.Addr]uint32{
		netip.MustParseAddr("10.0.2.2"):  plan.DSRMark(3),
		netip.MustParseAddr("fd00::2:2"): plan.DSRMark(3),
		netip.MustParseAddr("10.0.3.2"):  plan.DSRMark(1),
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
		t.Errorf("peer marks (-want +got):\n%s", diff)
	}
}
