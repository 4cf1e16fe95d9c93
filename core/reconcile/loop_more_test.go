package reconcile_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/switchyard-lb/switchyard/core/metrics"
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/model/modeltest"
	"github.com/switchyard-lb/switchyard/core/plan"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/core/plugin/plugintest"
	"github.com/switchyard-lb/switchyard/core/policystage"
	"github.com/switchyard-lb/switchyard/core/reconcile"
	"github.com/switchyard-lb/switchyard/core/runner/runnertest"
	"github.com/switchyard-lb/switchyard/ipvs/dryrun"
)

// initial pushes node-a with web and lb and marks the source synced.
func (h *harness) initial() {
	h.src.Push(model.Delta{
		Nodes: map[string]*model.Node{"node-a": nodeA},
		Services: map[model.ServiceKey]model.ServiceState{
			webKey: modeltest.State(modeltest.ClusterIP(webKey, "10.96.0.1"), webEndpoints...),
			lbKey:  lbLocal(lbKey, "10.96.0.20", "203.0.113.10", lbEndpoints...),
		},
	})
	h.src.SetSynced(true)
}

func mustSync(t *testing.T, l *reconcile.Loop) {
	t.Helper()
	if _, err := l.Sync(context.Background()); err != nil {
		t.Fatalf("Sync: %v", err)
	}
}

func TestAnnouncerFailureIsRetried(t *testing.T) {
	h := newHarness(t)
	h.initial()
	h.ann.FailNext(errors.New("socket closed"))
	_, err := h.loop.Sync(context.Background())
	if err == nil || !strings.Contains(err.Error(), "announcer arp: socket closed") {
		t.Fatalf("Sync error = %v, want the announcer's", err)
	}
	if got := testutil.ToFloat64(h.m.SyncErrors.WithLabelValues(metrics.StageAnnounce)); got != 1 {
		t.Errorf("sync_errors_total{stage=announce} = %v, want 1", got)
	}
	if _, lastErr := h.loop.LastSync(); lastErr == nil {
		t.Error("LastSync reports no error after a failed sync")
	}
	// The retry carries no change, yet the announcer gets its set again.
	mustSync(t, h.loop)
	want := []model.Announcement{announced("203.0.113.10", lbKey)}
	if diff := cmp.Diff(want, h.ann.Current(), cmpOpts...); diff != "" {
		t.Errorf("announced after retry (-want +got):\n%s", diff)
	}
	if last, lastErr := h.loop.LastSync(); lastErr != nil || !last.Equal(t0) {
		t.Errorf("LastSync() = %v, %v; want %v, nil", last, lastErr, t0)
	}
}

func TestStateShowsDesiredAndApplied(t *testing.T) {
	h := newHarness(t)
	if st := h.loop.State(); st.Synced || len(st.Desired) != 0 {
		t.Errorf("State before any sync = %+v", st)
	}
	h.src.Push(model.Delta{
		Nodes:    map[string]*model.Node{"node-a": nodeA},
		Services: map[model.ServiceKey]model.ServiceState{webKey: modeltest.State(modeltest.ClusterIP(webKey, "10.96.0.1"), webEndpoints...)},
	})
	h.src.SetSynced(true)
	mustSync(t, h.loop)
	h.src.Push(model.Delta{Services: map[model.ServiceKey]model.ServiceState{webKey: modeltest.State(modeltest.ClusterIP(webKey, "10.96.0.1"), webEndpoints[0])}})
	h.dp.FailNext(errors.New("boom"))
	if _, err := h.loop.Sync(context.Background()); err == nil {
		t.Fatal("Sync succeeded with a failing dataplane")
	}
	st := h.loop.State()
	web := func(dsts ...string) reconcile.ServiceState {
		vs := reconcile.VirtualServiceState{
			Protocol: "TCP", Address: netip.MustParseAddrPort("10.96.0.1:80"), Kind: "ClusterIP",
			PortName: "http", Scheduler: "rr", Destinations: []reconcile.DestinationState{},
		}
		for _, d := range dsts {
			vs.Destinations = append(vs.Destinations, reconcile.DestinationState{Address: netip.MustParseAddrPort(d), Weight: 1})
		}
		return reconcile.ServiceState{Service: "default/web", VirtualServices: []reconcile.VirtualServiceState{vs}}
	}
	want := reconcile.State{
		Node:      "node-a",
		Synced:    true,
		LastSync:  t0,
		LastError: "dataplane dryrun: boom",
		Desired:   []reconcile.ServiceState{web("10.244.1.2:8080")},
		Applied:   []reconcile.ServiceState{web("10.244.1.2:8080", "10.244.2.2:8080")},
		Announced: map[string][]reconcile.AnnouncementState{"arp": {}},
	}
	if diff := cmp.Diff(want, st, cmpOpts...); diff != "" {
		t.Errorf("State (-want +got):\n%s", diff)
	}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatalf("marshal State: %v", err)
	}
	for _, sub := range []string{`"desired":[{"service":"default/web"`, `"address":"10.244.2.2:8080","weight":1`, `"lastError":"dataplane dryrun: boom"`} {
		if !strings.Contains(string(b), sub) {
			t.Errorf("State JSON lacks %s:\n%s", sub, b)
		}
	}
}

func TestSetOptionsReplansEverything(t *testing.T) {
	h := newHarness(t)
	h.initial()
	mustSync(t, h.loop)
	h.loop.SetOptions(plan.Options{Scheduler: "wlc"})
	mustSync(t, h.loop)
	if got := h.dry.Stats(); got.FullApplies != 1 || len(got.LastChanged) != 2 {
		t.Errorf("after SetOptions: stats %+v, want a partial Apply of both Services", got)
	}
	for _, line := range table(h.dry) {
		if strings.HasPrefix(line, "TCP ") && !strings.HasSuffix(line, " wlc") {
			t.Errorf("virtual service %q does not use the new scheduler", line)
		}
	}
}

// TestRequestFullFromOnNodes: a Node change that changes no plan applies
// nothing, unless OnNodes asks for a full apply (a dataplane's local
// traffic detector following the Node's pod CIDRs), which that same Sync
// makes.
func TestRequestFullFromOnNodes(t *testing.T) {
	h := newHarness(t)
	var loop *reconcile.Loop
	ask := false
	loop = reconcile.New(reconcile.Config{
		NodeName: "node-a", Source: h.src, Planner: plan.New(plan.Options{}), Dataplane: h.dp,
		OnNodes: func(map[string]*model.Node) {
			if ask {
				loop.RequestFull()
			}
		},
	})
	h.initial()
	mustSync(t, loop)
	withCIDR := *nodeA
	withCIDR.PodCIDRs = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/24")}
	for i, tc := range []struct {
		ask  bool
		want int
	}{{false, 1}, {true, 2}} {
		ask = tc.ask
		n := withCIDR
		n.Labels = map[string]string{"round": fmt.Sprint(i)}
		h.src.Push(model.Delta{Nodes: map[string]*model.Node{"node-a": &n}})
		mustSync(t, loop)
		if got := h.dry.Stats().FullApplies; got != tc.want {
			t.Errorf("round %d (RequestFull %v): %d full applies, want %d", i, tc.ask, got, tc.want)
		}
	}
}

// TestPeriodicResyncAndNodeChange moves this node's address in the round
// of a periodic full resync: the NodePort follows it.
func TestPeriodicResyncAndNodeChange(t *testing.T) {
	h := newHarness(t)
	clock := runnertest.NewClock(t0)
	h.resyncEveryMinute(clock)
	h.initial()
	mustSync(t, h.loop)
	moved := &model.Node{Name: "node-a", Addresses: []netip.Addr{netip.MustParseAddr("192.168.1.99")}}
	h.src.Push(model.Delta{Nodes: map[string]*model.Node{"node-a": moved, "node-b": {Name: "node-b"}}})
	clock.Step(time.Minute)
	mustSync(t, h.loop)
	if got := h.dry.Stats().FullApplies; got != 2 {
		t.Errorf("FullApplies = %d after the period, want 2", got)
	}
	got := strings.Join(table(h.dry), "\n")
	if !strings.Contains(got, "TCP 192.168.1.99:30080 rr") || strings.Contains(got, "192.168.1.10") {
		t.Errorf("the NodePort did not follow the node's address:\n%s", got)
	}
}

func TestBusyLoopStillResyncsFully(t *testing.T) {
	h := newHarness(t)
	clock := runnertest.NewClock(t0)
	h.resyncEveryMinute(clock)
	h.initial()
	mustSync(t, h.loop)
	for i, want := range []int{1, 1, 2} { // at 0s (full), 30s, 60s
		clock.StepTo(t0.Add(time.Duration(i) * 30 * time.Second))
		if i == 0 {
			continue
		}
		eps := append(webEndpoints, modeltest.Ready("10.244.9.9", "node-z"))
		if i == 2 {
			eps = webEndpoints
		}
		h.src.Push(model.Delta{Services: map[model.ServiceKey]model.ServiceState{webKey: modeltest.State(modeltest.ClusterIP(webKey, "10.96.0.1"), eps...)}})
		mustSync(t, h.loop)
		if got := h.dry.Stats().FullApplies; got != want {
			t.Errorf("at %v: %d full applies, want %d", clock.Now().Sub(t0), got, want)
		}
	}
}

// TestSyncResult checks what Sync says it did, round by round.
func TestSyncResult(t *testing.T) {
	h := newHarness(t)
	web2 := modeltest.State(modeltest.ClusterIP(webKey, "10.96.0.1"), webEndpoints[0])
	steps := []struct {
		name     string
		do       func()
		want     reconcile.SyncResult
		wantFail bool
	}{
		{"the source has not synced", func() {}, reconcile.SyncResult{}, false},
		{"the first sync is full", h.initial, reconcile.SyncResult{Ran: true, Full: true, Applied: true, Changed: 2}, false},
		{"nothing changed", func() {}, reconcile.SyncResult{Ran: true}, false},
		{"one Service changed", func() {
			h.src.Push(model.Delta{Services: map[model.ServiceKey]model.ServiceState{webKey: web2}})
		}, reconcile.SyncResult{Ran: true, Applied: true, Changed: 1}, false},
		{"the Apply fails", func() {
			h.src.Push(model.Delta{Services: map[model.ServiceKey]model.ServiceState{webKey: modeltest.State(modeltest.ClusterIP(webKey, "10.96.0.1"), webEndpoints...)}})
			h.dp.FailNext(errors.New("boom"))
		}, reconcile.SyncResult{Ran: true, Changed: 1}, true},
		{"the retry is full", func() {}, reconcile.SyncResult{Ran: true, Full: true, Applied: true}, false},
	}
	for _, s := range steps {
		s.do()
		got, err := h.loop.Sync(context.Background())
		if (err != nil) != s.wantFail {
			t.Errorf("%s: Sync error %v, want failure %t", s.name, err, s.wantFail)
		}
		if diff := cmp.Diff(s.want, got); diff != "" {
			t.Errorf("%s: SyncResult (-want +got):\n%s", s.name, diff)
		}
	}
}

// TestContestedVirtualServiceHandedOver: two Services ask for one
// external IP and port; the plan gives it to the one sorting first, the
// state says who lost it to whom, and when the holder leaves an
// incremental Apply hands it to the other.
func TestContestedVirtualServiceHandedOver(t *testing.T) {
	h := newHarness(t)
	a, b := model.ServiceKey{Namespace: "x", Name: "a"}, model.ServiceKey{Namespace: "x", Name: "b"}
	withExternalIP := func(st model.ServiceState) model.ServiceState {
		st.Service.ExternalIPs = []netip.Addr{modeltest.Addr("192.0.2.30")}
		return st
	}
	h.src.Push(model.Delta{
		Nodes: map[string]*model.Node{"node-a": nodeA},
		Services: map[model.ServiceKey]model.ServiceState{
			a: withExternalIP(modeltest.State(modeltest.ClusterIP(a, "10.96.0.1"), modeltest.Ready("10.244.1.2", "node-a"))),
			b: withExternalIP(modeltest.State(modeltest.ClusterIP(b, "10.96.0.2"), modeltest.Ready("10.244.2.2", "node-b"))),
		},
	})
	h.src.SetSynced(true)
	mustSync(t, h.loop)
	external := func() []string {
		lines := table(h.dry)
		for i, l := range lines {
			if strings.HasPrefix(l, "TCP 192.0.2.30:80 ") {
				return lines[i : i+2]
			}
		}
		return nil
	}
	if diff := cmp.Diff([]string{"TCP 192.0.2.30:80 rr", "-> 10.244.1.2:8080 Masq 1 0 0"}, external()); diff != "" {
		t.Errorf("192.0.2.30:80 while a holds it (-want +got):\n%s", diff)
	}
	var contested []reconcile.ContestState
	for _, s := range h.loop.State().Desired {
		if s.Service == "x/b" {
			contested = s.Contested
		}
	}
	want := []reconcile.ContestState{{Protocol: "TCP", Address: netip.MustParseAddrPort("192.0.2.30:80"), Owner: "x/a"}}
	if diff := cmp.Diff(want, contested, cmpOpts...); diff != "" {
		t.Errorf("x/b's contested virtual services in the state (-want +got):\n%s", diff)
	}

	h.src.Push(model.Delta{Services: map[model.ServiceKey]model.ServiceState{a: {}}})
	mustSync(t, h.loop)
	if got := h.dry.Stats(); got.FullApplies != 1 || !cmp.Equal(got.LastChanged, []model.ServiceKey{a, b}) {
		t.Errorf("after a leaves: stats %+v, want an incremental Apply of a and b", got)
	}
	if diff := cmp.Diff([]string{"TCP 192.0.2.30:80 rr", "-> 10.244.2.2:8080 Masq 1 0 0"}, external()); diff != "" {
		t.Errorf("192.0.2.30:80 after a left (-want +got):\n%s", diff)
	}
}

// statsDryrun is the dry-run dataplane reporting fixed statistics.
type statsDryrun struct {
	*dryrun.Dataplane
	stats map[model.VirtualServiceKey]map[netip.AddrPort]plugin.EndpointStats
}

func (d statsDryrun) Stats([]model.VirtualServiceKey) (map[model.VirtualServiceKey]map[netip.AddrPort]plugin.EndpointStats, error) {
	return d.stats, nil
}

// TestLoopRunsPolicyStage checks the loop's side of the policy stage
// (core/policystage tests the stage itself): no sync before the policies
// have synced, the weighted plan reaches the dataplane, the dataplane's
// statistics reach the policies, and State shows each Service's policy.
func TestLoopRunsPolicyStage(t *testing.T) {
	dp := statsDryrun{Dataplane: dryrun.New(), stats: map[model.VirtualServiceKey]map[netip.AddrPort]plugin.EndpointStats{
		{Addr: modeltest.Addr("10.96.0.1"), Port: 80, Protocol: model.TCP}: {netip.MustParseAddrPort("10.244.1.2:8080"): {ActiveConns: 7}},
	}}
	var seen atomic.Uint32 // active connections of web's first endpoint
	pols := plugintest.NewPolicies("uniform")
	pols.Set("weights", plugintest.NewFunc("weights", func(_ context.Context, in *plugin.PolicyInput) (plugin.PolicyResult, error) {
		seen.Store(in.Endpoints[0].Stats.ActiveConns)
		return plugin.PolicyResult{Weights: []uint32{3, 1}}, nil
	}), nil, nil)
	pols.SetSynced(false)
	src := plugintest.NewSource()
	loop := reconcile.New(reconcile.Config{
		NodeName: "node-a", Source: src, Planner: plan.New(plan.Options{}), Dataplane: dp,
		Now:         func() time.Time { return t0 },
		PolicyStage: policystage.Config{Policies: pols, StatsInterval: time.Second, Deadline: time.Minute},
	})
	web := modeltest.State(modeltest.ClusterIP(webKey, "10.96.0.1"), webEndpoints...)
	web.Service.Policy = "weights"
	src.Push(model.Delta{Nodes: map[string]*model.Node{"node-a": nodeA}, Services: map[model.ServiceKey]model.ServiceState{webKey: web}})
	src.SetSynced(true)

	mustSync(t, loop)
	if st := dp.Dataplane.Stats(); st.Applies != 0 {
		t.Errorf("the loop applied %d times before the policies synced", st.Applies)
	}
	if n := src.Takes(); n != 0 {
		t.Errorf("the loop took the watch's changes %d times before the policies synced", n)
	}

	pols.SetSynced(true)
	mustSync(t, loop)
	want := []string{"TCP 10.96.0.1:80 wrr", "-> 10.244.1.2:8080 Masq 3 0 0", "-> 10.244.2.2:8080 Masq 1 0 0"}
	if diff := cmp.Diff(want, table(dp.Dataplane)); diff != "" {
		t.Errorf("dataplane (-want +got):\n%s", diff)
	}
	if got := seen.Load(); got != 7 {
		t.Errorf("the policy saw %d active connections, want the dataplane's 7", got)
	}
	wantState := []policystage.Status{{Service: "default/web", Policy: "weights", Ready: true, Reason: plugin.ReasonPolicyEvaluated, Message: "policy weights evaluated"}}
	if diff := cmp.Diff(wantState, loop.State().Policies); diff != "" {
		t.Errorf("State().Policies (-want +got):\n%s", diff)
	}
}
