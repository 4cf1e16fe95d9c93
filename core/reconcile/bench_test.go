package reconcile_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/switchyard-lb/switchyard/core/election"
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plan"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/core/plugin/plugintest"
	"github.com/switchyard-lb/switchyard/core/policystage"
	"github.com/switchyard-lb/switchyard/core/reconcile"
	"github.com/switchyard-lb/switchyard/plugins/builtin"
)

// nopDataplane takes every update and does nothing: the loop's own work.
type nopDataplane struct{}

func (nopDataplane) Name() string                               { return "nop" }
func (nopDataplane) Apply(context.Context, plugin.Update) error { return nil }
func (nopDataplane) Close() error                               { return nil }

// benchState is Service i of a cluster: a LoadBalancer Service (a
// ClusterIP one unless lb) with ten endpoints, the first on port
// 8000+gen%2.
func benchState(i, gen int, lb bool) model.ServiceState {
	a4 := func(a, b, c, d int) netip.Addr { return netip.AddrFrom4([4]byte{byte(a), byte(b), byte(c), byte(d)}) }
	svc := &model.Service{Key: model.ServiceKey{Namespace: "bench", Name: fmt.Sprintf("svc%d", i)}, Type: model.LoadBalancer,
		ClusterIPs: []netip.Addr{a4(10, 96, i>>8, i)}, LoadBalancerIPs: []netip.Addr{a4(198, 18, i>>8, i)},
		Ports: []model.ServicePort{{Name: "http", Protocol: model.TCP, Port: 80, NodePort: uint16(30000 + i%2000)}}}
	eps := make([]model.Endpoint, 10)
	for j := range eps {
		eps[j] = model.Endpoint{Addr: a4(10, 100+j, i>>8, i), Port: 8080, PortName: "http", Protocol: model.TCP, Ready: true, Serving: true, NodeName: "node-a"}
	}
	eps[0].Port = uint16(8000 + gen%2)
	if !lb {
		svc.Type, svc.LoadBalancerIPs, svc.Ports[0].NodePort = model.ClusterIP, nil, 0
	}
	return model.ServiceState{Service: svc, Endpoints: eps}
}

// BenchmarkSyncEndpointChange is one Sync taking one endpoint change of
// one of n ClusterIP or LoadBalancer Services (ten endpoints each; the
// LoadBalancer ones announced over BGP by this node), with the real
// planner and a dataplane that does nothing, with or without the policy
// stage (every Service on the built-in uniform policy, the daemon's
// default, with the daemon's statistics interval): the reconcile loop's
// own cost of a change, which should not grow with the cluster.
func BenchmarkSyncEndpointChange(b *testing.B) {
	for _, bc := range []struct {
		n        int
		lb       bool
		policies bool
	}{{1000, false, false}, {10000, false, false}, {1000, true, false}, {10000, true, false},
		{1000, false, true}, {10000, false, true}, {1000, true, true}, {10000, true, true}} {
		b.Run(fmt.Sprintf("services=%d/lb=%t/policies=%t", bc.n, bc.lb, bc.policies), func(b *testing.B) {
			n := bc.n
			src := plugintest.NewSource()
			src.SetSynced(true)
			cfg := reconcile.Config{
				NodeName: "node-a", Source: src, Planner: plan.New(plan.Options{}), Dataplane: nopDataplane{},
				Elected: []plugin.ElectedAnnouncer{{Announcer: plugintest.NewAnnouncer("bgp"), Mode: election.BGP}},
			}
			if bc.policies {
				pols := plugintest.NewPolicies(builtin.UniformName)
				pols.Set(builtin.UniformName, builtin.Uniform{}, nil, nil)
				cfg.PolicyStage = policystage.Config{Policies: pols, StatsInterval: 10 * time.Second}
			}
			loop := reconcile.New(cfg)
			all := make(map[model.ServiceKey]model.ServiceState, n)
			for i := range n {
				st := benchState(i, 0, bc.lb)
				all[st.Service.Key] = st
			}
			src.Push(model.Delta{Services: all, Nodes: map[string]*model.Node{"node-a": {Name: "node-a", Ready: true,
				Addresses: []netip.Addr{netip.MustParseAddr("192.168.1.10")}}}})
			if _, err := loop.Sync(b.Context()); err != nil {
				b.Fatal(err)
			}
			gen := 0
			for b.Loop() {
				gen++
				st := benchState(42, gen, bc.lb)
				src.Push(model.Delta{Services: map[model.ServiceKey]model.ServiceState{st.Service.Key: st}})
				res, err := loop.Sync(b.Context())
				if err != nil {
					b.Fatal(err)
				}
				if res.Changed != 1 || res.Full {
					b.Fatalf("sync %d: %+v, want one Service changed, not full", gen, res)
				}
			}
		})
	}
}
