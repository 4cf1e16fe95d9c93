package ipvs_test

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plan"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/core/runner/runnertest"
	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/ipvs/ipvstest"
)

// rig is a Dataplane over fakes.
type rig struct {
	kernel  *ipvstest.Fake
	addrs   *ipvstest.FakeAddresses
	sysctls *ipvstest.FakeSysctls
	ct      *ipvstest.FakeConntrack
	clock   *runnertest.Clock
}

func newRig() *rig {
	return &rig{
		kernel: ipvstest.NewFake(),
		addrs:  ipvstest.NewFakeAddresses(),
		sysctls: ipvstest.NewFakeSysctls(map[string]string{
			"net/ipv4/ip_forward": "0", "net/ipv4/vs/conntrack": "0",
			"net/ipv4/vs/expire_nodest_conn": "0", "net/ipv4/vs/expire_quiescent_template": "0",
			"net/ipv4/vs/conn_reuse_mode":  "1",
			"net/ipv4/conf/all/arp_ignore": "0", "net/ipv4/conf/all/arp_announce": "0",
		}),
		ct:    &ipvstest.FakeConntrack{},
		clock: runnertest.NewClock(time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)),
	}
}

func (r *rig) dataplane(t testing.TB) *ipvs.Dataplane {
	t.Helper()
	dp, err := ipvs.New(ipvs.Config{
		Kernel: r.kernel, Addresses: r.addrs, Sysctls: r.sysctls, Conntrack: r.ct,
		StrictARP: true, DrainTimeout: time.Minute, Now: r.clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	return dp
}

// mutations counts the calls that change the kernel.
func (r *rig) mutations() int {
	n := 0
	for _, op := range []ipvstest.Op{ipvstest.OpAddService, ipvstest.OpUpdateService, ipvstest.OpDeleteService,
		ipvstest.OpAddDestination, ipvstest.OpUpdateDestination, ipvstest.OpDeleteDestination} {
		n += r.kernel.Calls(op)
	}
	return n
}

func (r *rig) bound(t testing.TB) []netip.Addr {
	t.Helper()
	a, err := r.addrs.Addrs(ipvs.DefaultDummy)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

var (
	svcWeb = model.ServiceKey{Namespace: "default", Name: "web"}
	svcDNS = model.ServiceKey{Namespace: "kube-system", Name: "dns"}
)

func be(addr string, port uint16, w uint32) model.Destination {
	return model.Destination{Addr: netip.MustParseAddr(addr), Port: port, Weight: w}
}

// webPlan is a ClusterIP and a NodePort frontend of one port, and a UDP
// ClusterIP Service.
func webPlan(dests ...model.Destination) *model.Plan {
	return &model.Plan{Services: map[model.ServiceKey]*model.ServicePlan{
		svcWeb: {Key: svcWeb, VirtualServices: []model.VirtualService{
			{VirtualServiceKey: keyA, Kind: model.FrontendClusterIP, Destinations: dests},
			{VirtualServiceKey: keyNP, Kind: model.FrontendNodePort, Scheduler: "wrr", Destinations: dests},
		}},
		svcDNS: {Key: svcDNS, VirtualServices: []model.VirtualService{
			{VirtualServiceKey: keyA53, Kind: model.FrontendClusterIP, Scheduler: "mh", Flags: []string{"mh-port"},
				Destinations: []model.Destination{be("10.244.1.3", 8080, 1), be("10.244.2.3", 8080, 1)}},
		}},
	}}
}

func entry(s ipvs.Service, ds ...ipvs.DestinationState) ipvstest.Entry {
	return ipvstest.Entry{Service: s, Destinations: ds}
}

// newNodeRig is a rig whose node has nodeIP on eth0 and a foreign IPVS
// service (keyFor, on an address that is not on switchyard0).
func newNodeRig(t *testing.T) (*rig, ipvs.Service) {
	t.Helper()
	r := newRig()
	r.addrs.AddLink("eth0", "device")
	if err := r.addrs.AddAddr("eth0", nodeIP); err != nil {
		t.Fatal(err)
	}
	foreign := ipvs.Service{VirtualServiceKey: keyFor, Scheduler: "rr"}
	if err := r.kernel.AddService(foreign); err != nil {
		t.Fatal(err)
	}
	return r, foreign
}

func TestDataplaneProgramsAndAdopts(t *testing.T) {
	r, foreign := newNodeRig(t)
	plan := webPlan(be("10.244.1.2", 8080, 1), be("10.244.2.2", 8080, 2))
	dp := r.dataplane(t)
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatalf("Apply: %v", err)
	}

	web := []ipvs.DestinationState{dstState("10.244.1.2", 1, 0, 0), dstState("10.244.2.2", 2, 0, 0)}
	want := []ipvstest.Entry{
		entry(ipvs.Service{VirtualServiceKey: keyA53, Scheduler: "mh", Flags: ipvs.FlagSchedOpt2},
			ipvs.DestinationState{Destination: ipvs.Destination{DestinationKey: ipvs.DestinationKey{Addr: netip.MustParseAddr("10.244.1.3"), Port: 8080}, Weight: 1}},
			ipvs.DestinationState{Destination: ipvs.Destination{DestinationKey: ipvs.DestinationKey{Addr: netip.MustParseAddr("10.244.2.3"), Port: 8080}, Weight: 1}}),
		entry(rr(keyA), web...),
		entry(foreign),
		entry(ipvs.Service{VirtualServiceKey: keyNP, Scheduler: "wrr"}, web...),
	}
	if diff := cmp.Diff(want, r.kernel.Table(), cmpAddrs); diff != "" {
		t.Errorf("kernel table (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]netip.Addr{vipA}, r.bound(t), cmpAddrs); diff != "" {
		t.Errorf("addresses on switchyard0 (-want +got):\n%s", diff)
	}
	wantSysctls := map[string]string{
		"net/ipv4/ip_forward": "1", "net/ipv4/vs/conntrack": "1",
		"net/ipv4/vs/expire_nodest_conn": "1", "net/ipv4/vs/expire_quiescent_template": "1",
		"net/ipv4/vs/conn_reuse_mode":  "1",
		"net/ipv4/conf/all/arp_ignore": "1", "net/ipv4/conf/all/arp_announce": "2",
	}
	if diff := cmp.Diff(wantSysctls, r.sysctls.Values()); diff != "" {
		t.Errorf("kernel sysctls (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantSysctls, dp.Sysctls()); diff != "" {
		t.Errorf("reported sysctls (-want +got):\n%s", diff)
	}

	// A restart: a fresh Dataplane with the same plan changes nothing.
	before := r.mutations()
	dp2 := r.dataplane(t)
	if err := dp2.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatalf("Apply after restart: %v", err)
	}
	if n := r.mutations() - before; n != 0 {
		t.Errorf("restart with an unchanged plan made %d kernel changes, want 0", n)
	}
	if diff := cmp.Diff(want, r.kernel.Table(), cmpAddrs); diff != "" {
		t.Errorf("kernel table after restart (-want +got):\n%s", diff)
	}

	// Everything deleted: the owned services and address go, the foreign
	// service and the node's address stay. The NodePort service, recorded
	// by this Dataplane when it adopted it, goes too.
	if err := dp2.Apply(t.Context(), plugin.Update{Plan: &model.Plan{}, Full: true}); err != nil {
		t.Fatalf("Apply empty plan: %v", err)
	}
	if diff := cmp.Diff([]ipvstest.Entry{entry(foreign)}, r.kernel.Table(), cmpAddrs); diff != "" {
		t.Errorf("kernel table after deleting everything (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]netip.Addr{}, r.bound(t), cmpAddrs); diff != "" {
		t.Errorf("addresses on switchyard0 (-want +got):\n%s", diff)
	}
	if got, _ := r.addrs.Addrs("eth0"); !cmp.Equal(got, []netip.Addr{nodeIP}, cmpAddrs) {
		t.Errorf("eth0 addresses = %v, want the node's %v untouched", got, nodeIP)
	}
	// The UDP service's entries go when it first gets real servers (the
	// first Apply; not after the restart, which found them in the
	// kernel) and when it is deleted.
	wantCT := []ipvstest.ConntrackDeletion{{VIP: vipA, Port: 53}, {VIP: vipA, Port: 53}}
	if diff := cmp.Diff(wantCT, r.ct.Deletions(), cmpAddrs); diff != "" {
		t.Errorf("conntrack deletions (-want +got):\n%s", diff)
	}
}

func TestDataplaneStats(t *testing.T) {
	// The foreign service is not the dataplane's: its counters are not read.
	r, _ := newNodeRig(t)
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

	// Asked for every owned virtual service, the foreign one and one
	// nobody programs; a virtual service not asked for is not read.
	asked := []model.VirtualServiceKey{keyA, keyNP, keyA53, keyFor, {Addr: netip.MustParseAddr("192.0.2.99"), Port: 80, Protocol: model.TCP}}
	got, err := dp.Stats(asked)
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
		t.Errorf("Stats dumped %d times, want one dump per owned virtual service asked for (%d)", n, len(want))
	}
	before = r.kernel.Calls(ipvstest.OpDestinations)
	got, err = dp.Stats([]model.VirtualServiceKey{keyNP})
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	if diff := cmp.Diff(map[model.VirtualServiceKey]map[netip.AddrPort]plugin.EndpointStats{keyNP: want[keyNP]}, got, cmpAddrs); diff != "" {
		t.Errorf("Stats of one virtual service (-want +got):\n%s", diff)
	}
	if n := r.kernel.Calls(ipvstest.OpDestinations) - before; n != 1 {
		t.Errorf("Stats of one virtual service dumped %d times, want 1", n)
	}

	// A failing dump is reported, and leaves the virtual services out.
	boom := errors.New("netlink: boom")
	r.kernel.SetError(ipvstest.OpDestinations, boom)
	got, err = dp.Stats(asked)
	if !errors.Is(err, boom) {
		t.Errorf("Stats error = %v, want %v", err, boom)
	}
	if len(got) != 0 {
		t.Errorf("Stats after failed dumps = %v, want nothing", got)
	}
}

// gone is the web backend the drain tests remove.
var gone = ipvs.DestinationKey{Addr: netip.MustParseAddr("10.244.1.2"), Port: 8080}

// drainingDataplane applies webPlan with two backends and gives gone
// active and inactive connections on the ClusterIP and the NodePort.
func (r *rig) drainingDataplane(t *testing.T, active, inactive uint32) *ipvs.Dataplane {
	t.Helper()
	dp := r.dataplane(t)
	if err := dp.Apply(t.Context(), plugin.Update{Plan: webPlan(be("10.244.1.2", 8080, 1), be("10.244.2.2", 8080, 1)), Full: true}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []model.VirtualServiceKey{keyA, keyNP} {
		if err := r.kernel.SetConns(k, gone, active, inactive); err != nil {
			t.Fatal(err)
		}
	}
	return dp
}

func TestDataplaneGracefulTermination(t *testing.T) {
	r := newRig()
	dp := r.drainingDataplane(t, 1, 2)
	destsOf := func(k model.VirtualServiceKey) []ipvs.DestinationState {
		t.Helper()
		ds, err := r.kernel.Destinations(k)
		if err != nil {
			t.Fatal(err)
		}
		return ds
	}

	// The endpoint leaves: weight 0, still there while it has connections.
	plan := webPlan(be("10.244.2.2", 8080, 1))
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Changed: []model.ServiceKey{svcWeb}}); err != nil {
		t.Fatal(err)
	}
	want := []ipvs.DestinationState{dstState("10.244.1.2", 0, 1, 2), dstState("10.244.2.2", 1, 0, 0)}
	if diff := cmp.Diff(want, destsOf(keyA), cmpAddrs); diff != "" {
		t.Errorf("destinations while draining (-want +got):\n%s", diff)
	}
	if got := dp.Draining(); got != 2 {
		t.Errorf("Draining() = %d, want 2", got)
	}

	// Only inactive connections left: TCP still waits for them.
	if err := r.kernel.SetConns(keyA, gone, 0, 1); err != nil {
		t.Fatal(err)
	}
	if err := dp.Drain(); err != nil {
		t.Fatal(err)
	}
	if got := len(destsOf(keyA)); got != 2 {
		t.Errorf("destinations with inactive connections left = %d, want 2", got)
	}
	// Connections end on the ClusterIP: deleted there; the NodePort
	// keeps its until the timeout.
	if err := r.kernel.SetConns(keyA, gone, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := dp.Drain(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want[1:], destsOf(keyA), cmpAddrs); diff != "" {
		t.Errorf("ClusterIP destinations after connections ended (-want +got):\n%s", diff)
	}
	if got := len(destsOf(keyNP)); got != 2 {
		t.Errorf("NodePort destinations before the timeout = %d, want 2", got)
	}
	r.clock.Step(time.Minute)
	if err := dp.Drain(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want[1:], destsOf(keyNP), cmpAddrs); diff != "" {
		t.Errorf("NodePort destinations after the timeout (-want +got):\n%s", diff)
	}
	if got := dp.Draining(); got != 0 {
		t.Errorf("Draining() = %d, want 0", got)
	}
	// The cache followed: a Full apply of the same plan changes nothing.
	before := r.mutations()
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatal(err)
	}
	if n := r.mutations() - before; n != 0 {
		t.Errorf("full apply after draining made %d kernel changes, want 0", n)
	}
}

func TestDataplaneUDPBackendRemoval(t *testing.T) {
	r := newRig()
	dp := r.dataplane(t)
	plan := webPlan()
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatal(err)
	}
	// IPVS counts UDP flows as inactive: they do not hold the backend.
	removed := ipvs.DestinationKey{Addr: netip.MustParseAddr("10.244.1.3"), Port: 8080}
	if err := r.kernel.SetConns(keyA53, removed, 0, 5); err != nil {
		t.Fatal(err)
	}
	plan.Services[svcDNS].VirtualServices[0].Destinations = []model.Destination{be("10.244.2.3", 8080, 1)}
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Changed: []model.ServiceKey{svcDNS}}); err != nil {
		t.Fatal(err)
	}
	got, err := r.kernel.Destinations(keyA53)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]ipvs.DestinationState{dstState("10.244.2.3", 1, 0, 0)}, got, cmpAddrs); diff != "" {
		t.Errorf("UDP destinations (-want +got):\n%s", diff)
	}
	// The first Apply gave the service real servers (every entry goes),
	// the second removed one (its entries go).
	wantCT := []ipvstest.ConntrackDeletion{{VIP: vipA, Port: 53}, {VIP: vipA, Port: 53, Backend: removed.Addr}}
	if diff := cmp.Diff(wantCT, r.ct.Deletions(), cmpAddrs); diff != "" {
		t.Errorf("conntrack deletions (-want +got):\n%s", diff)
	}
}

func TestDataplaneRecoversAfterError(t *testing.T) {
	r := newRig()
	dp := r.dataplane(t)
	plan := webPlan(be("10.244.1.2", 8080, 1))
	r.kernel.SetError(ipvstest.OpAddDestination, errors.New("injected"))
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err == nil {
		t.Fatal("Apply with failing AddDestination: no error")
	}
	r.kernel.SetError(ipvstest.OpAddDestination, nil)
	// Something else changes the kernel behind the dataplane's back.
	if err := r.kernel.DeleteService(keyNP); err != nil {
		t.Fatal(err)
	}
	// An incremental update of nothing: after an error the dataplane
	// re-reads the kernel and repairs all of it.
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan}); err != nil {
		t.Fatalf("Apply after the error: %v", err)
	}
	want := []ipvstest.Entry{
		entry(ipvs.Service{VirtualServiceKey: keyA53, Scheduler: "mh", Flags: ipvs.FlagSchedOpt2},
			dstState("10.244.1.3", 1, 0, 0), dstState("10.244.2.3", 1, 0, 0)),
		entry(rr(keyA), dstState("10.244.1.2", 1, 0, 0)),
		entry(ipvs.Service{VirtualServiceKey: keyNP, Scheduler: "wrr"}, dstState("10.244.1.2", 1, 0, 0)),
	}
	if diff := cmp.Diff(want, r.kernel.Table(), cmpAddrs); diff != "" {
		t.Errorf("kernel table (-want +got):\n%s", diff)
	}
}

// A dump interrupted by concurrent changes returns partial results; the
// dataplane must read again instead of acting on them or failing.
func TestDataplaneRetriesInterruptedDumps(t *testing.T) {
	r := newRig()
	plan := webPlan(be("10.244.1.2", 8080, 1), be("10.244.2.2", 8080, 2))
	if err := r.dataplane(t).Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	want := r.kernel.Table()

	// A restarted dataplane reads everything; each dump is interrupted
	// once. Acting on the partial results would re-create what is there
	// (and fail with ErrExists).
	r.addrs.Interrupt(1)
	r.kernel.Interrupt(ipvstest.OpServices, 1)
	r.kernel.Interrupt(ipvstest.OpDestinations, 1)
	services, mutations := r.kernel.Calls(ipvstest.OpServices), r.mutations()
	dp := r.dataplane(t)
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatalf("Apply with interrupted dumps: %v", err)
	}
	if n := r.mutations() - mutations; n != 0 {
		t.Errorf("Apply with interrupted dumps made %d kernel changes, want 0", n)
	}
	if n := r.kernel.Calls(ipvstest.OpServices) - services; n != 2 {
		t.Errorf("Services called %d times, want 2 (one interrupted)", n)
	}
	if diff := cmp.Diff(want, r.kernel.Table(), cmpAddrs); diff != "" {
		t.Errorf("kernel table (-want +got):\n%s", diff)
	}

	// A dump interrupted on every attempt fails the Apply, and nothing
	// is pruned on its partial results: the empty plan deletes nothing.
	r.kernel.Interrupt(ipvstest.OpServices, 1000)
	err := r.dataplane(t).Apply(t.Context(), plugin.Update{Plan: &model.Plan{}, Full: true})
	if !errors.Is(err, ipvs.ErrInterrupted) {
		t.Fatalf("Apply with a dump interrupted every time = %v, want ErrInterrupted", err)
	}
	if diff := cmp.Diff(want, r.kernel.Table(), cmpAddrs); diff != "" {
		t.Errorf("kernel table after a failed load (-want +got):\n%s", diff)
	}
	r.kernel.Interrupt(ipvstest.OpServices, 0)

	// An interrupted conntrack deletion is asked again.
	before := len(r.ct.Deletions())
	r.ct.Interrupt(1)
	if err := dp.Apply(t.Context(), plugin.Update{Plan: &model.Plan{}, Full: true}); err != nil {
		t.Fatalf("Apply empty plan: %v", err)
	}
	wantCT := []ipvstest.ConntrackDeletion{{VIP: vipA, Port: 53}, {VIP: vipA, Port: 53}}
	if diff := cmp.Diff(wantCT, r.ct.Deletions()[before:], cmpAddrs); diff != "" {
		t.Errorf("conntrack deletions (-want +got):\n%s", diff)
	}
}

// applyThenRemove applies plan whole, then removes the Service gone from
// it as a change.
func applyThenRemove(t *testing.T, dp *ipvs.Dataplane, plan *model.Plan, gone model.ServiceKey) {
	t.Helper()
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatal(err)
	}
	delete(plan.Services, gone)
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Changed: []model.ServiceKey{gone}}); err != nil {
		t.Fatal(err)
	}
}

func TestDataplaneSharedAddress(t *testing.T) {
	// Two Services share a LoadBalancer IP on different ports: removing
	// one keeps the address bound for the other.
	r := newRig()
	dp := r.dataplane(t)
	lb := netip.MustParseAddr("192.0.2.10")
	mk := func(port uint16) *model.ServicePlan {
		return &model.ServicePlan{VirtualServices: []model.VirtualService{{
			VirtualServiceKey: model.VirtualServiceKey{Addr: lb, Port: port, Protocol: model.TCP},
			Kind:              model.FrontendLoadBalancer, Destinations: []model.Destination{be("10.244.1.2", 8080, 1)},
		}}}
	}
	a, b := model.ServiceKey{Namespace: "x", Name: "a"}, model.ServiceKey{Namespace: "x", Name: "b"}
	plan := &model.Plan{Services: map[model.ServiceKey]*model.ServicePlan{a: mk(80), b: mk(443)}}
	applyThenRemove(t, dp, plan, a)
	if diff := cmp.Diff([]netip.Addr{lb}, r.bound(t), cmpAddrs); diff != "" {
		t.Errorf("addresses on switchyard0 (-want +got):\n%s", diff)
	}
	if got := len(r.kernel.Table()); got != 1 {
		t.Errorf("kernel services = %d, want 1", got)
	}
}

func TestDataplaneSkipsAnInvalidService(t *testing.T) {
	r := newRig()
	dp := r.dataplane(t)
	plan := webPlan(be("10.244.1.2", 8080, 1))
	plan.Services[svcDNS].VirtualServices[0].Flags = []string{"bogus"}
	err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true})
	if err == nil {
		t.Fatal("Apply with an unknown scheduler flag: no error")
	}
	var got []model.VirtualServiceKey
	for _, e := range r.kernel.Table() {
		got = append(got, e.Service.VirtualServiceKey)
	}
	if diff := cmp.Diff([]model.VirtualServiceKey{keyA, keyNP}, got, cmpAddrs); diff != "" {
		t.Errorf("programmed services (-want +got):\n%s", diff)
	}
}

func TestDataplaneNodePortOnABoundAddress(t *testing.T) {
	// An externalIP that is also a node address carries a NodePort
	// frontend too: removing the NodePort Service must not unbind the
	// address the external-IP Service still needs.
	r := newRig()
	dp := r.dataplane(t)
	ip := netip.MustParseAddr("192.0.2.20")
	vs := func(kind model.FrontendKind, port uint16) *model.ServicePlan {
		return &model.ServicePlan{VirtualServices: []model.VirtualService{{
			VirtualServiceKey: model.VirtualServiceKey{Addr: ip, Port: port, Protocol: model.TCP},
			Kind:              kind, Destinations: []model.Destination{be("10.244.1.2", 8080, 1)},
		}}}
	}
	ext, np := model.ServiceKey{Namespace: "x", Name: "ext"}, model.ServiceKey{Namespace: "x", Name: "np"}
	plan := &model.Plan{Services: map[model.ServiceKey]*model.ServicePlan{
		ext: vs(model.FrontendExternalIP, 80), np: vs(model.FrontendNodePort, 30080),
	}}
	applyThenRemove(t, dp, plan, np)
	if diff := cmp.Diff([]netip.Addr{ip}, r.bound(t), cmpAddrs); diff != "" {
		t.Errorf("addresses on switchyard0 (-want +got):\n%s", diff)
	}
}

func TestDataplaneDrainCancelledAtWeightZero(t *testing.T) {
	// A draining real server that comes back wanted at weight 0 (a policy
	// weight) needs no kernel change, but must no longer be deleted.
	r := newRig()
	dp := r.drainingDataplane(t, 1, 0)
	if err := dp.Apply(t.Context(), plugin.Update{Plan: webPlan(be("10.244.2.2", 8080, 1)), Changed: []model.ServiceKey{svcWeb}}); err != nil {
		t.Fatal(err)
	}
	if got := dp.Draining(); got != 2 {
		t.Fatalf("Draining() = %d, want 2", got)
	}
	back := webPlan(be("10.244.1.2", 8080, 0), be("10.244.2.2", 8080, 1))
	if err := dp.Apply(t.Context(), plugin.Update{Plan: back, Changed: []model.ServiceKey{svcWeb}}); err != nil {
		t.Fatal(err)
	}
	r.clock.Step(time.Minute)
	if err := dp.Drain(); err != nil {
		t.Fatal(err)
	}
	if got := dp.Draining(); got != 0 {
		t.Errorf("Draining() = %d, want 0", got)
	}
	got, err := r.kernel.Destinations(keyA)
	if err != nil {
		t.Fatal(err)
	}
	want := []ipvs.DestinationState{dstState("10.244.1.2", 0, 1, 0), dstState("10.244.2.2", 1, 0, 0)}
	if diff := cmp.Diff(want, got, cmpAddrs); diff != "" {
		t.Errorf("destinations (-want +got):\n%s", diff)
	}
}

func TestDataplaneContestedVirtualService(t *testing.T) {
	// Two Services want the same external IP and port: the planner gives
	// it to the one that sorts first; when it lets go, the other takes it
	// over at once, not only at the next full resync. The dataplane
	// programs what the planner's plan and changed keys say.
	r := newRig()
	dp := r.dataplane(t)
	ip := netip.MustParseAddr("192.0.2.30")
	key := model.VirtualServiceKey{Addr: ip, Port: 80, Protocol: model.TCP}
	a, b := model.ServiceKey{Namespace: "x", Name: "a"}, model.ServiceKey{Namespace: "x", Name: "b"}
	clusterIPs := map[model.ServiceKey]netip.Addr{a: netip.MustParseAddr("10.96.0.1"), b: netip.MustParseAddr("10.96.0.2")}
	state := func(sk model.ServiceKey, backend string) map[model.ServiceKey]model.ServiceState {
		return map[model.ServiceKey]model.ServiceState{sk: {
			Service: &model.Service{Key: sk, Type: model.ClusterIP, ClusterIPs: []netip.Addr{clusterIPs[sk]}, ExternalIPs: []netip.Addr{ip},
				Ports: []model.ServicePort{{Name: "http", Protocol: model.TCP, Port: 80}}},
			Endpoints: []model.Endpoint{{Addr: netip.MustParseAddr(backend), Port: 8080, PortName: "http",
				Protocol: model.TCP, Ready: true, Serving: true}},
		}}
	}
	gone := func(sk model.ServiceKey) map[model.ServiceKey]model.ServiceState {
		return map[model.ServiceKey]model.ServiceState{sk: {}}
	}
	planner := plan.New(plan.Options{})
	planner.Update(nil, state(b, "10.244.2.2"))
	if err := dp.Apply(t.Context(), plugin.Update{Plan: planner.Plan(), Full: true}); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name   string
		change map[model.ServiceKey]model.ServiceState
		want   []ipvstest.Entry
	}{
		{"a arrives and takes it from b", state(a, "10.244.1.1"),
			[]ipvstest.Entry{entry(rr(key), dstState("10.244.1.1", 1, 0, 0))}},
		{"b changes and still loses", state(b, "10.244.2.3"),
			[]ipvstest.Entry{entry(rr(key), dstState("10.244.1.1", 1, 0, 0))}},
		{"a leaves and b takes over", gone(a),
			[]ipvstest.Entry{entry(rr(key), dstState("10.244.2.3", 1, 0, 0))}},
		{"b leaves", gone(b), []ipvstest.Entry{}},
	}
	for _, s := range steps {
		changed := planner.Update(nil, s.change)
		if err := dp.Apply(t.Context(), plugin.Update{Plan: planner.Plan(), Changed: changed}); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		got := []ipvstest.Entry{}
		for _, e := range r.kernel.Table() {
			if e.Service.Addr == ip { // the cluster IPs are not contested
				got = append(got, e)
			}
		}
		if diff := cmp.Diff(s.want, got, cmpAddrs); diff != "" {
			t.Errorf("%s: kernel table at %s (-want +got):\n%s", s.name, ip, diff)
		}
	}
	if diff := cmp.Diff([]netip.Addr{}, r.bound(t), cmpAddrs); diff != "" {
		t.Errorf("addresses on switchyard0 at the end (-want +got):\n%s", diff)
	}
}

// A UDP Service that goes from no endpoints to some loses the conntrack
// entries its clients made meanwhile, on each of its frontends, once its
// real servers are in; later endpoint changes flush nothing whole.
func TestDataplaneUDPFlushWhenServed(t *testing.T) {
	r := newRig()
	keyNP53 := model.VirtualServiceKey{Addr: nodeIP, Port: 30053, Protocol: model.UDP}
	plan := func(dests ...model.Destination) *model.Plan {
		return &model.Plan{Services: map[model.ServiceKey]*model.ServicePlan{
			svcDNS: {Key: svcDNS, VirtualServices: []model.VirtualService{
				{VirtualServiceKey: keyA53, Kind: model.FrontendClusterIP, Destinations: dests},
				{VirtualServiceKey: keyNP53, Kind: model.FrontendNodePort, Destinations: dests},
			}},
		}}
	}
	changed := []model.ServiceKey{svcDNS}
	dp := r.dataplane(t)
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan(), Full: true}); err != nil {
		t.Fatal(err)
	}
	if got := r.ct.Deletions(); len(got) != 0 {
		t.Errorf("conntrack deletions without endpoints = %v, want none", got)
	}

	// The real server cannot be added: nothing is flushed (a flush before
	// it is in would only let new stale entries form).
	r.kernel.SetError(ipvstest.OpAddDestination, errors.New("injected"))
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan(be("10.244.1.3", 8080, 1)), Changed: changed}); err == nil {
		t.Fatal("Apply with a failing AddDestination succeeded")
	}
	if got := r.ct.Deletions(); len(got) != 0 {
		t.Errorf("conntrack deletions with the real servers missing = %v, want none", got)
	}
	r.kernel.SetError(ipvstest.OpAddDestination, nil)

	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan(be("10.244.1.3", 8080, 1)), Changed: changed}); err != nil {
		t.Fatal(err)
	}
	want := []ipvstest.ConntrackDeletion{{VIP: vipA, Port: 53}, {VIP: nodeIP, Port: 30053}}
	if diff := cmp.Diff(want, r.ct.Deletions(), cmpAddrs); diff != "" {
		t.Errorf("conntrack deletions after the first endpoint (-want +got):\n%s", diff)
	}
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan(be("10.244.1.3", 8080, 1), be("10.244.2.3", 8080, 1)), Changed: changed}); err != nil {
		t.Fatal(err)
	}
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan(be("10.244.1.3", 8080, 1), be("10.244.2.3", 8080, 1)), Full: true}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, r.ct.Deletions(), cmpAddrs); diff != "" {
		t.Errorf("conntrack deletions after a second endpoint and a resync (-want +got):\n%s", diff)
	}
}

func TestDataplaneHandOverInOneApply(t *testing.T) {
	// A plan that moves a virtual service from one Service to another
	// changes both: whichever the dataplane reads first, the key ends with
	// its new holder, bound once.
	ip := netip.MustParseAddr("192.0.2.30")
	key := model.VirtualServiceKey{Addr: ip, Port: 80, Protocol: model.TCP}
	mk := func(sk model.ServiceKey, backend string, holds bool) *model.ServicePlan {
		sp := &model.ServicePlan{Key: sk}
		if holds {
			sp.VirtualServices = []model.VirtualService{{VirtualServiceKey: key, Kind: model.FrontendExternalIP,
				Destinations: []model.Destination{be(backend, 8080, 1)}}}
		}
		return sp
	}
	a, b := model.ServiceKey{Namespace: "x", Name: "a"}, model.ServiceKey{Namespace: "x", Name: "b"}
	for _, from := range []model.ServiceKey{a, b} {
		to := b
		if from == b {
			to = a
		}
		r := newRig()
		dp := r.dataplane(t)
		plan := &model.Plan{Services: map[model.ServiceKey]*model.ServicePlan{from: mk(from, "10.244.1.1", true), to: mk(to, "10.244.2.2", false)}}
		if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
			t.Fatal(err)
		}
		plan = &model.Plan{Services: map[model.ServiceKey]*model.ServicePlan{from: mk(from, "10.244.1.1", false), to: mk(to, "10.244.2.2", true)}}
		if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Changed: []model.ServiceKey{a, b}}); err != nil {
			t.Fatalf("from %v to %v: %v", from, to, err)
		}
		want := []ipvstest.Entry{entry(rr(key), dstState("10.244.2.2", 1, 0, 0))}
		if diff := cmp.Diff(want, r.kernel.Table(), cmpAddrs); diff != "" {
			t.Errorf("from %v to %v: kernel table (-want +got):\n%s", from, to, diff)
		}
		if diff := cmp.Diff([]netip.Addr{ip}, r.bound(t), cmpAddrs); diff != "" {
			t.Errorf("from %v to %v: addresses on switchyard0 (-want +got):\n%s", from, to, diff)
		}
	}
}

func TestDataplaneRefusesAKeyPlannedTwice(t *testing.T) {
	// The plan breaks its contract (one Service per virtual service key):
	// the first Service keeps the key, the other gets an error naming both.
	r := newRig()
	dp := r.dataplane(t)
	key := model.VirtualServiceKey{Addr: netip.MustParseAddr("192.0.2.30"), Port: 80, Protocol: model.TCP}
	mk := func(backend string) *model.ServicePlan {
		return &model.ServicePlan{VirtualServices: []model.VirtualService{{VirtualServiceKey: key,
			Kind: model.FrontendExternalIP, Destinations: []model.Destination{be(backend, 8080, 1)}}}}
	}
	a, b := model.ServiceKey{Namespace: "x", Name: "a"}, model.ServiceKey{Namespace: "x", Name: "b"}
	plan := &model.Plan{Services: map[model.ServiceKey]*model.ServicePlan{a: mk("10.244.1.1"), b: mk("10.244.2.2")}}
	err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true})
	if err == nil || !strings.Contains(err.Error(), "service x/b: virtual service TCP/192.0.2.30:80 is planned for x/a too") {
		t.Errorf("Apply of a key planned twice: error %v, want one naming x/b and x/a", err)
	}
	want := []ipvstest.Entry{entry(rr(key), dstState("10.244.1.1", 1, 0, 0))}
	if diff := cmp.Diff(want, r.kernel.Table(), cmpAddrs); diff != "" {
		t.Errorf("kernel table (-want +got):\n%s", diff)
	}
}

// TestDataplaneSetDrainTimeout changes the drain bound while a real
// server drains: the new bound counts from when it began, a longer one
// keeps it past the old, zero is DefaultDrainTimeout.
func TestDataplaneSetDrainTimeout(t *testing.T) {
	r := newRig()
	dp := r.drainingDataplane(t, 1, 0) // DrainTimeout: 1m
	if err := dp.Apply(t.Context(), plugin.Update{Plan: webPlan(be("10.244.2.2", 8080, 1)), Changed: []model.ServiceKey{svcWeb}}); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name    string
		timeout time.Duration
		advance time.Duration // since the previous step
		want    int           // real servers still draining
	}{
		{"longer than the elapsed time", 10 * time.Minute, 2 * time.Minute, 2},
		{"zero is the default, 15m", 0, 12 * time.Minute, 2},
		{"shorter than the elapsed time", 90 * time.Second, 0, 0},
	}
	for _, s := range steps {
		dp.SetDrainTimeout(s.timeout)
		r.clock.Step(s.advance)
		if err := dp.Drain(); err != nil {
			t.Fatal(err)
		}
		if got := dp.Draining(); got != s.want {
			t.Errorf("%s: Draining() = %d, want %d", s.name, got, s.want)
		}
	}
	ds, err := r.kernel.Destinations(keyA)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]ipvs.DestinationState{dstState("10.244.2.2", 1, 0, 0)}, ds, cmpAddrs); diff != "" {
		t.Errorf("destinations after the drain (-want +got):\n%s", diff)
	}
}

// TestDataplaneFullResyncReadsTableOnce: a full resync reads the real
// servers of every virtual service in one pass (TableReader), not a dump
// per service, and still puts back a real server someone deleted.
func TestDataplaneFullResyncReadsTableOnce(t *testing.T) {
	r := newRig()
	dp := r.dataplane(t)
	plan := webPlan(be("10.244.1.2", 8080, 1), be("10.244.2.2", 8080, 1))
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatal(err)
	}
	want := r.kernel.Table()
	if err := r.kernel.DeleteDestination(keyA, ipvs.DestinationKey{Addr: netip.MustParseAddr("10.244.2.2"), Port: 8080}); err != nil {
		t.Fatal(err)
	}
	dumps, reads := r.kernel.Calls(ipvstest.OpDestinations), r.kernel.Calls(ipvstest.OpReadTable)
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, r.kernel.Table(), cmpAddrs); diff != "" {
		t.Errorf("table after the full resync (-want +got):\n%s", diff)
	}
	if n := r.kernel.Calls(ipvstest.OpDestinations) - dumps; n != 0 {
		t.Errorf("full resync dumped %d services' real servers, want 0", n)
	}
	if n := r.kernel.Calls(ipvstest.OpReadTable) - reads; n != 1 {
		t.Errorf("full resync read the table %d times, want 1", n)
	}

	// A failed read falls back to one dump per service.
	r.kernel.SetError(ipvstest.OpReadTable, errors.New("no /proc"))
	dumps = r.kernel.Calls(ipvstest.OpDestinations)
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatal(err)
	}
	if n := r.kernel.Calls(ipvstest.OpDestinations) - dumps; n != len(want) {
		t.Errorf("full resync without the table dumped %d services' real servers, want %d", n, len(want))
	}
}

// TestDataplaneFullResyncTrustsCacheForUnseen: when the one-pass table
// read keeps leaving services out (other network namespaces hold
// services), a periodic full resync does not dump each of them: it dumps
// a bounded number in turn and trusts the cache for the rest, so a real
// server someone deleted from one of them is put back a few resyncs
// later, not at once; after a kernel error the cache is not trusted and
// every one is dumped.
func TestDataplaneFullResyncTrustsCacheForUnseen(t *testing.T) {
	const n, budget = 600, 256 // budget: ipvs's verifyPerReload
	plan := benchPlan(n)
	r := newRig()
	dp := r.dataplane(t)
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatal(err)
	}
	want := r.kernel.Table()
	var keys []model.VirtualServiceKey
	for _, e := range want {
		keys = append(keys, e.Service.VirtualServiceKey)
	}
	r.kernel.HideInTable(keys...)
	victim := keys[n-1] // the last one a rotation from the first key reaches
	gone := want[n-1].Destinations[3].DestinationKey
	if err := r.kernel.DeleteDestination(victim, gone); err != nil {
		t.Fatal(err)
	}
	resyncs := 0
	for ; resyncs < 5 && !cmp.Equal(want, r.kernel.Table(), cmpAddrs); resyncs++ {
		dumps := r.kernel.Calls(ipvstest.OpDestinations)
		if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
			t.Fatal(err)
		}
		if got := r.kernel.Calls(ipvstest.OpDestinations) - dumps; got != budget {
			t.Errorf("resync %d dumped %d services' real servers, want %d", resyncs+1, got, budget)
		}
	}
	if diff := cmp.Diff(want, r.kernel.Table(), cmpAddrs); diff != "" {
		t.Fatalf("table after %d full resyncs (-want +got):\n%s", resyncs, diff)
	}
	if wantResyncs := (n + budget - 1) / budget; resyncs != wantResyncs {
		t.Errorf("the deleted real server came back after %d full resyncs, want %d", resyncs, wantResyncs)
	}

	// After an Apply with a kernel error the cache is not trusted: the
	// next load dumps every service the table did not show.
	r.kernel.SetError(ipvstest.OpUpdateDestination, errors.New("boom"))
	plan.Services[model.ServiceKey{Namespace: "bench", Name: "svc7"}].VirtualServices[0].Destinations[0].Weight = 3
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Changed: []model.ServiceKey{{Namespace: "bench", Name: "svc7"}}}); err == nil {
		t.Fatal("Apply with a failing update: no error")
	}
	r.kernel.SetError(ipvstest.OpUpdateDestination, nil)
	dumps := r.kernel.Calls(ipvstest.OpDestinations)
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatal(err)
	}
	if got := r.kernel.Calls(ipvstest.OpDestinations) - dumps; got != n {
		t.Errorf("the reload after a kernel error dumped %d services' real servers, want %d", got, n)
	}
}

// TestDataplaneUDPConntrackOnePass checks that the conntrack entries of
// every UDP service and backend an Apply or a Drain removes go in one
// pass over the table. A pass reads the whole table: one per removed
// backend held the dataplane's lock for minutes in the cluster lab's soak
// (100 Services, 1,000 endpoint updates), so that Drain waited on it and
// 168 drained real servers, without a connection, stayed at weight 0.
func TestDataplaneUDPConntrackOnePass(t *testing.T) {
	const services = 4
	key := func(i int) model.VirtualServiceKey {
		return model.VirtualServiceKey{Addr: netip.AddrFrom4([4]byte{10, 96, 1, byte(i)}), Port: 53, Protocol: model.UDP}
	}
	sk := func(i int) model.ServiceKey { return model.ServiceKey{Namespace: "soak", Name: fmt.Sprint(i)} }
	planOf := func(backends map[int][]string) *model.Plan {
		p := &model.Plan{Services: map[model.ServiceKey]*model.ServicePlan{}}
		for i, addrs := range backends {
			var ds []model.Destination
			for _, a := range addrs {
				ds = append(ds, be(a, 5353, 1))
			}
			p.Services[sk(i)] = &model.ServicePlan{Key: sk(i), VirtualServices: []model.VirtualService{
				{VirtualServiceKey: key(i), Kind: model.FrontendClusterIP, Destinations: ds},
			}}
		}
		return p
	}
	all := func() []model.ServiceKey {
		var out []model.ServiceKey
		for i := range services {
			out = append(out, sk(i))
		}
		return out
	}
	flows := func(i int, backends ...string) []ipvstest.ConntrackDeletion {
		var out []ipvstest.ConntrackDeletion
		for _, b := range backends {
			out = append(out, ipvstest.ConntrackDeletion{VIP: key(i).Addr, Port: 53, Backend: netip.MustParseAddr(b)})
		}
		return out
	}
	three := []string{"10.244.1.10", "10.244.2.10", "10.244.3.10"}
	r := newRig()
	dp := r.dataplane(t)
	first := map[int][]string{}
	for i := range services {
		first[i] = three
	}
	if err := dp.Apply(t.Context(), plugin.Update{Plan: planOf(first), Full: true}); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name  string
		run   func() error
		want  []ipvstest.ConntrackDeletion
		wantN int // passes over the table
	}{{
		// Every service keeps one backend of three but the last, which
		// goes: 7 backends and a service, still one pass.
		name: "apply removes backends and a service",
		run: func() error {
			// A flow on service 0's second backend holds it (UDP: active).
			if err := r.kernel.SetConns(key(0), ipvs.DestinationKey{Addr: netip.MustParseAddr(three[1]), Port: 5353}, 1, 0); err != nil {
				return err
			}
			return dp.Apply(t.Context(), plugin.Update{Plan: planOf(map[int][]string{0: three[:1], 1: three[:1], 2: three[:1]}), Changed: all()})
		},
		want: slices.Concat([]ipvstest.ConntrackDeletion{{VIP: key(3).Addr, Port: 53}},
			flows(0, three[2]), flows(1, three[1:]...), flows(2, three[1:]...)),
		wantN: 1,
	}, {
		name:  "drain with nothing to delete",
		run:   dp.Drain,
		wantN: 0,
	}, {
		name: "drain deletes the backend whose flow ended",
		run: func() error {
			if err := r.kernel.SetConns(key(0), ipvs.DestinationKey{Addr: netip.MustParseAddr(three[1]), Port: 5353}, 0, 0); err != nil {
				return err
			}
			return dp.Drain()
		},
		want:  flows(0, three[1]),
		wantN: 1,
	}}
	for _, st := range steps {
		passes, deletions := r.ct.Passes(), len(r.ct.Deletions())
		if err := st.run(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if got := r.ct.Passes() - passes; got != st.wantN {
			t.Errorf("%s: %d passes over the conntrack table, want %d", st.name, got, st.wantN)
		}
		// In any order: a pass deletes them all at once.
		byFlow := func(a, b ipvstest.ConntrackDeletion) int {
			return strings.Compare(fmt.Sprint(a), fmt.Sprint(b))
		}
		got := slices.SortedFunc(slices.Values(r.ct.Deletions()[deletions:]), byFlow)
		if len(got) == 0 {
			got = nil
		}
		if diff := cmp.Diff(slices.SortedFunc(slices.Values(st.want), byFlow), got, cmpAddrs); diff != "" {
			t.Errorf("%s: conntrack deletions (-want +got):\n%s", st.name, diff)
		}
	}
	if got := dp.Draining(); got != 0 {
		t.Errorf("Draining() = %d, want 0", got)
	}
}

// TestDataplaneDumpLeavesOutServices checks that the dataplane knows every
// service the kernel holds when its dump of the services leaves some out,
// as the kernel's does when another network namespace deletes services
// while it runs (ipvstest.Fake.SkipInDump). In the cluster lab's soak
// (three nodes' namespaces in one kernel, 300 Services deleted on all of
// them at once) the cache missed services that way: a wanted one failed
// its re-creation with ErrExists ("add service ...: already exists"), and
// 26 unwanted ones were never deleted while their addresses left
// switchyard0, which left them foreign for good.
func TestDataplaneDumpLeavesOutServices(t *testing.T) {
	vip := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 96, 2, byte(i)}) }
	sk := func(i int) model.ServiceKey { return model.ServiceKey{Namespace: "soak", Name: fmt.Sprint(i)} }
	keys := func(i int) []model.VirtualServiceKey {
		return []model.VirtualServiceKey{
			{Addr: vip(i), Port: 53, Protocol: model.UDP},
			{Addr: vip(i), Port: 80, Protocol: model.TCP},
		}
	}
	dests := []model.Destination{be("10.244.1.2", 8080, 1), be("10.244.2.2", 8080, 1)}
	// Service i has a ClusterIP frontend of two ports; service 9 a Local
	// LoadBalancer one, whose in-cluster traffic has a firewall-mark
	// service (not in /proc/net/ip_vs).
	planOf := func(ids ...int) *model.Plan {
		p := &model.Plan{Services: map[model.ServiceKey]*model.ServicePlan{}}
		for _, i := range ids {
			sp := &model.ServicePlan{Key: sk(i)}
			for _, k := range keys(i) {
				vs := model.VirtualService{VirtualServiceKey: k, Kind: model.FrontendClusterIP, Destinations: dests}
				if i == 9 {
					vs.Kind, vs.Local, vs.Destinations, vs.Internal = model.FrontendLoadBalancer, true, dests[:1], dests
				}
				sp.VirtualServices = append(sp.VirtualServices, vs)
			}
			p.Services[sk(i)] = sp
		}
		return p
	}
	// held is what the kernel holds: the services' keys and the bound
	// addresses.
	type held struct {
		Services []model.VirtualServiceKey
		Bound    []netip.Addr
	}
	heldOf := func(r *rig) held {
		var h held
		for _, e := range r.kernel.Table() {
			h.Services = append(h.Services, e.Service.VirtualServiceKey)
		}
		h.Bound = r.bound(t)
		return h
	}
	all := []int{0, 1, 2, 9}
	r := newRig()
	dp := r.dataplane(t)
	if err := dp.Apply(t.Context(), plugin.Update{Plan: planOf(all...), Full: true}); err != nil {
		t.Fatal(err)
	}
	marks := map[int][]model.VirtualServiceKey{} // service 9's mark services
	for _, e := range r.kernel.Table() {
		if _, ok := ipvs.MarkOf(e.Service.VirtualServiceKey); ok {
			marks[9] = append(marks[9], e.Service.VirtualServiceKey)
		}
	}
	if len(marks[9]) != 2 {
		t.Fatalf("service 9 has %d firewall-mark services, want 2", len(marks[9]))
	}
	skipped := func(ids ...int) []model.VirtualServiceKey {
		var out []model.VirtualServiceKey
		for _, i := range ids {
			out = append(out, keys(i)...)
			out = append(out, marks[i]...)
		}
		return out
	}
	steps := []struct {
		name string
		skip []int // the Services whose services the load's dump leaves out
		plan []int // the Services wanted
	}{
		{name: "wanted services left out", skip: []int{1, 9}, plan: all},
		{name: "deleted Services' services left out", skip: []int{2, 9}, plan: []int{0, 1}},
		{name: "every Service deleted", skip: []int{0}, plan: nil},
	}
	for _, st := range steps {
		before := heldOf(r)
		mutations := r.mutations()
		r.kernel.SkipInDump(skipped(st.skip...)...)
		if err := dp.Apply(t.Context(), plugin.Update{Plan: planOf(st.plan...), Full: true}); err != nil {
			t.Errorf("%s: Apply: %v", st.name, err)
		}
		// The same plan again, with a whole dump: a service left
		// behind is no longer the dataplane's (its address is gone).
		if err := dp.Apply(t.Context(), plugin.Update{Plan: planOf(st.plan...), Full: true}); err != nil {
			t.Errorf("%s: Apply again: %v", st.name, err)
		}
		want := held{}
		for _, i := range st.plan {
			want.Services = append(want.Services, keys(i)...)
			want.Services = append(want.Services, marks[i]...)
			want.Bound = append(want.Bound, vip(i))
		}
		slices.SortFunc(want.Services, model.VirtualServiceKey.Compare)
		if diff := cmp.Diff(want, heldOf(r), cmpAddrs); diff != "" {
			t.Errorf("%s: kernel (-want +got):\n%s", st.name, diff)
		}
		if slices.Equal(st.plan, all) {
			if n := r.mutations() - mutations; n != 0 {
				t.Errorf("%s: %d kernel changes for an unchanged plan (held before: %v), want 0", st.name, n, before)
			}
		}
	}
}
