package reconcile_test

import (
	"context"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/model/modeltest"
	"github.com/switchyard-lb/switchyard/core/plan"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/core/plugin/plugintest"
	"github.com/switchyard-lb/switchyard/core/policystage"
	"github.com/switchyard-lb/switchyard/core/reconcile"
	"github.com/switchyard-lb/switchyard/ipvs/dryrun"
)

// statsDryrun is the dry-run dataplane reporting fixed statistics.
type statsDryrun struct {
	*dryrun.Dataplane
	stats map[model.VirtualServiceKey]map[netip.AddrPort]plugin.EndpointStats
}

func (d statsDryrun) Stats() (map[model.VirtualServiceKey]map[netip.AddrPort]plugin.EndpointStats, error) {
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
