package reconcile_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/switchyard-lb/switchyard/core/election"
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/model/modeltest"
	"github.com/switchyard-lb/switchyard/core/plan"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/core/plugin/plugintest"
	"github.com/switchyard-lb/switchyard/core/policystage"
	"github.com/switchyard-lb/switchyard/core/reconcile"
	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/ipvs/dryrun"
	"github.com/switchyard-lb/switchyard/ipvs/ipvstest"
)

// kernelTable renders the fake kernel's virtual services and real servers.
func kernelTable(k *ipvstest.Fake) []string {
	var out []string
	for _, e := range k.Table() {
		s := e.Service
		out = append(out, fmt.Sprintf("%s %s %s", s.Protocol, netip.AddrPortFrom(s.Addr, s.Port), s.Scheduler))
		for _, d := range e.Destinations {
			out = append(out, fmt.Sprintf("-> %s w%d", netip.AddrPortFrom(d.Addr, d.Port), d.Weight))
		}
	}
	return out
}

// TestLoopEarlyApply: with EarlyApply, a loop over the ipvs dataplane
// programs what the Source handed out before its caches synced, adding
// only: the previous daemon's stale service stays bound, a real server
// the partial data lacks keeps its weight, nothing is announced and
// OnNodes is not called. The first Sync after the caches synced is full:
// it prunes the stale service and address, drains the real server, and
// announces.
func TestLoopEarlyApply(t *testing.T) {
	stale := netip.MustParseAddr("10.96.0.99")
	staleKey := model.VirtualServiceKey{Addr: stale, Port: 80, Protocol: model.TCP}
	kernel, addrs, dp := previousDaemon(t, map[model.VirtualServiceKey][]ipvs.Destination{staleKey: nil})
	src, ann := plugintest.NewSource(), plugintest.NewAnnouncer("bgp")
	var onNodes []int
	loop := reconcile.New(reconcile.Config{
		NodeName: "node-a", Source: src, Planner: plan.New(plan.Options{}), Dataplane: dp,
		Elected: []plugin.ElectedAnnouncer{{Announcer: ann, Mode: election.BGP}},
		OnNodes: func(n map[string]*model.Node) { onNodes = append(onNodes, len(n)) },
		Now:     func() time.Time { return t0 }, EarlyApply: true,
	})
	lb := func(eps ...model.Endpoint) map[model.ServiceKey]model.ServiceState {
		st := lbLocal(lbKey, "10.96.0.20", "203.0.113.10", eps...)
		st.Service.ExternalTrafficPolicy = model.PolicyCluster
		return map[model.ServiceKey]model.ServiceState{lbKey: st}
	}
	// Sorted by address: the ClusterIP, the stale service, the NodePort,
	// the ingress. The NodePort lives on the node's address, where only
	// the firewall table's record makes it Switchyard's: there is no
	// table yet, and writing one would write partial data, so it waits
	// for the full sync.
	table := func(stale, nodePort bool, dests ...string) []string {
		var out []string
		fes := []string{"10.96.0.20:80"}
		if stale {
			fes = append(fes, "10.96.0.99:80")
		}
		if nodePort {
			fes = append(fes, "192.168.1.10:30080")
		}
		for _, fe := range append(fes, "203.0.113.10:80") {
			out = append(out, "TCP "+fe+" rr")
			if fe == "10.96.0.99:80" {
				continue
			}
			for _, d := range dests {
				out = append(out, "-> "+d)
			}
		}
		return out
	}
	listed := []netip.Addr{modeltest.Addr("10.96.0.20"), stale, modeltest.Addr("203.0.113.10")}

	steps := []struct {
		name     string
		synced   bool
		push     *model.Delta
		want     reconcile.SyncResult
		table    []string
		bound    []netip.Addr
		announce []model.Announcement
		onNodes  []int
	}{
		{
			name:  "listing: what arrived is added, the stale service stays",
			push:  &model.Delta{Nodes: map[string]*model.Node{"node-a": nodeA}, Services: lb(modeltest.Ready("10.244.1.5", "node-a"))},
			want:  reconcile.SyncResult{Early: true, Applied: true, Changed: 1},
			table: table(true, false, "10.244.1.5:8080 w1"),
			bound: listed,
		},
		{
			name:  "listing: a real server the partial data lacks is not drained",
			push:  &model.Delta{Services: lb(modeltest.Ready("10.244.2.5", "node-b"))},
			want:  reconcile.SyncResult{Early: true, Applied: true, Changed: 1},
			table: table(true, false, "10.244.1.5:8080 w1", "10.244.2.5:8080 w1"),
			bound: listed,
		},
		{
			name:  "listing: nothing new, nothing applied",
			want:  reconcile.SyncResult{Early: true},
			table: table(true, false, "10.244.1.5:8080 w1", "10.244.2.5:8080 w1"),
			bound: listed,
		},
		{
			name:   "synced: the full sync prunes, drains and announces",
			synced: true,
			want:   reconcile.SyncResult{Ran: true, Full: true, Applied: true},
			// 10.244.1.5 had no connections: drained and deleted at once.
			table:    table(false, true, "10.244.2.5:8080 w1"),
			bound:    []netip.Addr{modeltest.Addr("10.96.0.20"), modeltest.Addr("203.0.113.10")},
			announce: []model.Announcement{announced("203.0.113.10", lbKey)},
			onNodes:  []int{1},
		},
	}
	for _, st := range steps {
		if st.push != nil {
			src.Push(*st.push)
		}
		src.SetSynced(st.synced)
		syncStep(t, loop, kernel, st.name, st.want, st.table)
		bound, _ := addrs.Addrs(ipvs.DefaultDummy)
		if diff := cmp.Diff(st.bound, bound, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
			t.Errorf("%s: addresses on %s (-want +got):\n%s", st.name, ipvs.DefaultDummy, diff)
		}
		if diff := cmp.Diff(st.announce, ann.Current(), cmpopts.EquateComparable(netip.Addr{}), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: announced (-want +got):\n%s", st.name, diff)
		}
		if diff := cmp.Diff(st.onNodes, onNodes, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: OnNodes calls, by nodes (-want +got):\n%s", st.name, diff)
		}
		if last, _ := loop.LastSync(); last.IsZero() == st.synced {
			t.Errorf("%s: LastSync = %v, want it set only once synced", st.name, last)
		}
	}
}

// syncStep runs one Sync of a step named name and checks its result and
// the fake kernel's table.
func syncStep(t *testing.T, loop *reconcile.Loop, kernel *ipvstest.Fake, name string, want reconcile.SyncResult, table []string) {
	t.Helper()
	res, err := loop.Sync(t.Context())
	if err != nil {
		t.Fatalf("%s: Sync: %v", name, err)
	}
	if diff := cmp.Diff(want, res); diff != "" {
		t.Errorf("%s: result (-want +got):\n%s", name, diff)
	}
	if diff := cmp.Diff(table, kernelTable(kernel)); diff != "" {
		t.Errorf("%s: kernel table (-want +got):\n%s", name, diff)
	}
}

// previousDaemon returns a fake kernel holding what a previous daemon
// left, the virtual services of left with their real servers and their
// addresses bound, and an ipvs dataplane over it.
func previousDaemon(t *testing.T, left map[model.VirtualServiceKey][]ipvs.Destination) (*ipvstest.Fake, *ipvstest.FakeAddresses, *ipvs.Dataplane) {
	t.Helper()
	kernel, addrs := ipvstest.NewFake(), ipvstest.NewFakeAddresses()
	if err := addrs.EnsureDummy(ipvs.DefaultDummy); err != nil {
		t.Fatal(err)
	}
	for k, dests := range left {
		if err := addrs.AddAddr(ipvs.DefaultDummy, k.Addr); err != nil {
			t.Fatal(err)
		}
		sched := "rr"
		if len(dests) > 0 {
			sched = "wrr"
		}
		if err := kernel.AddService(ipvs.Service{VirtualServiceKey: k, Scheduler: sched}); err != nil {
			t.Fatal(err)
		}
		for _, d := range dests {
			if err := kernel.AddDestination(k, d); err != nil {
				t.Fatal(err)
			}
		}
	}
	dp, err := ipvs.New(ipvs.Config{Kernel: kernel, Addresses: addrs, Sysctls: ipvstest.NewFakeSysctls(map[string]string{
		"net/ipv4/ip_forward": "1", "net/ipv4/vs/conntrack": "1", "net/ipv4/vs/expire_nodest_conn": "1",
		"net/ipv4/vs/expire_quiescent_template": "1", "net/ipv4/vs/conn_reuse_mode": "1",
	}),
		Firewall: &ipvstest.FakeFirewall{}})
	if err != nil {
		t.Fatal(err)
	}
	return kernel, addrs, dp
}

// TestLoopEarlyApplyWhilePoliciesLoad: with EarlyApply, the caches synced
// and a policy ConfigMap's module still compiling, the loop programs
// every Service but those of the policy that is loading, add-only. Those
// are held back, not fallen back: what the previous daemon left of them
// keeps its weights, and nothing is reported on them. Once their policy
// loads they are applied (still add-only while the policies have not
// synced); the first Sync after the policies synced is the full one.
func TestLoopEarlyApplyWhilePoliciesLoad(t *testing.T) {
	apiVS := model.VirtualServiceKey{Addr: modeltest.Addr("10.96.0.30"), Port: 80, Protocol: model.TCP}
	staleVS := model.VirtualServiceKey{Addr: modeltest.Addr("10.96.0.99"), Port: 80, Protocol: model.TCP}
	dest := func(addr string, w uint32) ipvs.Destination {
		return ipvs.Destination{DestinationKey: ipvs.DestinationKey{Addr: modeltest.Addr(addr), Port: 8080}, Weight: w}
	}
	kernel, _, dp := previousDaemon(t, map[model.VirtualServiceKey][]ipvs.Destination{
		apiVS:   {dest("10.244.4.4", 5), dest("10.244.4.5", 1)}, // the slow policy's last weights
		staleVS: nil,
	})
	pols, rep := plugintest.NewPolicies("uniform"), plugintest.NewReporter()
	weights := func(w ...uint32) *plugintest.Func {
		return plugintest.NewFunc("fixed", func(context.Context, *plugin.PolicyInput) (plugin.PolicyResult, error) {
			return plugin.PolicyResult{Weights: w}, nil
		})
	}
	pols.Set("uniform", weights(1, 1), nil, nil)
	pols.SetSynced(false)
	src := plugintest.NewSource()
	loop := reconcile.New(reconcile.Config{
		NodeName: "node-a", Source: src, Planner: plan.New(plan.Options{}), Dataplane: dp,
		Now: func() time.Time { return t0 }, EarlyApply: true,
		PolicyStage: policystage.Config{Policies: pols, Reporter: rep, Deadline: time.Minute},
	})
	api := modeltest.State(modeltest.ClusterIP(apiKey, "10.96.0.30"), modeltest.Ready("10.244.4.4", "node-a"), modeltest.Ready("10.244.4.5", "node-b"))
	api.Service.Policy = "slow"
	src.Push(model.Delta{Nodes: map[string]*model.Node{"node-a": nodeA}, Services: map[model.ServiceKey]model.ServiceState{
		webKey: modeltest.State(modeltest.ClusterIP(webKey, "10.96.0.1"), webEndpoints...),
		apiKey: api,
	}})
	src.SetSynced(true)

	web := []string{"TCP 10.96.0.1:80 rr", "-> 10.244.1.2:8080 w1", "-> 10.244.2.2:8080 w1"}
	apiTable := func(w1, w2 int) []string {
		return []string{"TCP 10.96.0.30:80 wrr", fmt.Sprintf("-> 10.244.4.4:8080 w%d", w1), fmt.Sprintf("-> 10.244.4.5:8080 w%d", w2)}
	}
	stale := []string{"TCP 10.96.0.99:80 rr"}
	steps := []struct {
		name   string
		before func()
		want   reconcile.SyncResult
		table  []string
	}{
		{
			name:  "slow is compiling: web is added, api keeps the previous daemon's weights",
			want:  reconcile.SyncResult{Early: true, Applied: true, Changed: 1},
			table: slices.Concat(web, apiTable(5, 1), stale),
		},
		{
			name:  "still compiling, nothing new: nothing applied",
			want:  reconcile.SyncResult{Early: true},
			table: slices.Concat(web, apiTable(5, 1), stale),
		},
		{
			name:   "slow loaded, others still loading: api is applied add-only",
			before: func() { pols.Set("slow", weights(3, 1), nil, nil) },
			want:   reconcile.SyncResult{Early: true, Applied: true, Changed: 1},
			table:  slices.Concat(web, apiTable(3, 1), stale),
		},
		{
			name:   "the policies synced: the full sync prunes",
			before: func() { pols.SetSynced(true) },
			want:   reconcile.SyncResult{Ran: true, Full: true, Applied: true},
			table:  slices.Concat(web, apiTable(3, 1)),
		},
	}
	for _, st := range steps {
		if st.before != nil {
			st.before()
		}
		syncStep(t, loop, kernel, st.name, st.want, st.table)
		// Held back is not failed: no Event, no condition but ready.
		for _, e := range rep.TakeEvents() {
			if e.Service == apiKey && e.Reason != plugin.ReasonPolicyEvaluated {
				t.Errorf("%s: Event on %s: %+v", st.name, apiKey, e)
			}
		}
		if c, ok := rep.Conditions()[apiKey]; ok && !c.Ready {
			t.Errorf("%s: %s's condition %+v, want none or ready", st.name, apiKey, c)
		}
	}
}

// TestLoopEarlyApplyNeedsAddOnly: a dataplane that cannot apply add-only
// gets nothing before the caches synced, EarlyApply or not, and the
// Source's changes wait for the first full sync.
func TestLoopEarlyApplyNeedsAddOnly(t *testing.T) {
	src, dry := plugintest.NewSource(), dryrun.New()
	loop := reconcile.New(reconcile.Config{NodeName: "node-a", Source: src, Planner: plan.New(plan.Options{}),
		Dataplane: dry, Now: func() time.Time { return t0 }, EarlyApply: true})
	src.Push(model.Delta{Services: map[model.ServiceKey]model.ServiceState{
		webKey: modeltest.State(modeltest.ClusterIP(webKey, "10.96.0.1"), webEndpoints...)}})
	res, err := loop.Sync(t.Context())
	if err != nil || res != (reconcile.SyncResult{}) {
		t.Fatalf("Sync before the caches synced = %+v, %v; want nothing done", res, err)
	}
	if n, st := src.Takes(), dry.Stats(); n != 0 || st.Applies != 0 {
		t.Errorf("before the caches synced: %d Takes, %d Applies; want none", n, st.Applies)
	}
	src.SetSynced(true)
	if res, err := loop.Sync(t.Context()); err != nil || !res.Full || !res.Applied {
		t.Errorf("first Sync after the caches synced = %+v, %v; want a full apply", res, err)
	}
	if diff := cmp.Diff(webTable, table(dry)); diff != "" {
		t.Errorf("dataplane (-want +got):\n%s", diff)
	}
}
