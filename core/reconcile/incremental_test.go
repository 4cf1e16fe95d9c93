package reconcile_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/switchyard-lb/switchyard/core/election"
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plan"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/core/plugin/plugintest"
	"github.com/switchyard-lb/switchyard/core/reconcile"
)

// TestIncrementalElectionMatchesWhole feeds the same random changes of
// Services and nodes to two loops: one elects again only the Services a
// Sync took a change of, the other (its gossip view has no opinion, so
// that every Sync elects everything) every Service every time. Their
// layer-2, BGP and with-nodes announcers must be sent the same sets
// after every Sync.
func TestIncrementalElectionMatchesWhole(t *testing.T) {
	type rig struct {
		src  *plugintest.Source
		anns []*plugintest.Announcer
		loop *reconcile.Loop
	}
	newRig := func(alive election.AliveFunc) rig {
		r := rig{src: plugintest.NewSource()}
		r.src.SetSynced(true)
		var elected []plugin.ElectedAnnouncer
		for _, ea := range []plugin.ElectedAnnouncer{{Mode: election.Layer2}, {Mode: election.BGP}, {Mode: election.BGP, WithNodes: true}} {
			a := plugintest.NewAnnouncer(fmt.Sprintf("%d", len(r.anns)))
			r.anns = append(r.anns, a)
			ea.Announcer = a
			elected = append(elected, ea)
		}
		r.loop = reconcile.New(reconcile.Config{NodeName: "node-a", Source: r.src, Planner: plan.New(plan.Options{}),
			Dataplane: nopDataplane{}, Elected: elected, Alive: alive})
		return r
	}
	incremental, whole := newRig(nil), newRig(func(string) (bool, bool) { return false, false })
	rnd := rand.New(rand.NewPCG(1, 2))
	names := []string{"node-a", "node-b", "node-c"}
	node := func(name string, ready bool) *model.Node {
		return &model.Node{Name: name, Ready: ready, Addresses: []netip.Addr{netip.AddrFrom4([4]byte{192, 168, 1, byte(10 + len(name))})}}
	}
	service := func(i int) model.ServiceState {
		k := model.ServiceKey{Namespace: "default", Name: fmt.Sprintf("svc%d", i)}
		if rnd.IntN(8) == 0 {
			return model.ServiceState{} // deleted
		}
		etp := model.PolicyCluster
		if rnd.IntN(2) == 0 {
			etp = model.PolicyLocal
		}
		svc := &model.Service{Key: k, Type: model.LoadBalancer, ClusterIPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 96, 0, byte(i)})},
			LoadBalancerIPs:       []netip.Addr{netip.AddrFrom4([4]byte{198, 18, 0, byte(rnd.IntN(40))})},
			Ports:                 []model.ServicePort{{Name: "http", Protocol: model.TCP, Port: 80, NodePort: uint16(30000 + i)}},
			ExternalTrafficPolicy: etp, HealthCheckNodePort: uint16(32000 + i)}
		var eps []model.Endpoint
		for j := range rnd.IntN(4) {
			ready := rnd.IntN(4) != 0
			eps = append(eps, model.Endpoint{Addr: netip.AddrFrom4([4]byte{10, 244, byte(i), byte(j)}), Port: 8080, PortName: "http",
				Protocol: model.TCP, Ready: ready, Serving: ready, NodeName: names[rnd.IntN(len(names))]})
		}
		return model.ServiceState{Service: svc, Endpoints: eps}
	}
	// elsewhere changes only the endpoints on other nodes than this one:
	// the plan here stays, the election may not.
	cur := map[int]model.ServiceState{}
	elsewhere := func(i int) model.ServiceState {
		st := cur[i]
		if st.Service == nil {
			return service(i)
		}
		eps := slices.Clone(st.Endpoints)
		for j := range eps {
			if eps[j].NodeName != "node-a" {
				eps[j].NodeName = names[1+rnd.IntN(2)]
				eps[j].Ready = rnd.IntN(2) == 0
				eps[j].Serving = eps[j].Ready
			}
		}
		eps = append(eps, model.Endpoint{Addr: netip.AddrFrom4([4]byte{10, 245, byte(i), byte(len(eps))}), Port: 8080, PortName: "http",
			Protocol: model.TCP, Ready: true, Serving: true, NodeName: names[1+rnd.IntN(2)]})
		return model.ServiceState{Service: st.Service, Endpoints: eps}
	}
	first := model.Delta{Services: map[model.ServiceKey]model.ServiceState{}, Nodes: map[string]*model.Node{}}
	for _, n := range names {
		first.Nodes[n] = node(n, true)
	}
	for i := range 40 {
		if st := service(i); st.Service != nil {
			first.Services[st.Service.Key] = st
			cur[i] = st
		}
	}
	announcing := make([]int, len(incremental.anns))
	for step := range 300 {
		d := first
		if step > 0 {
			d = model.Delta{Services: map[model.ServiceKey]model.ServiceState{}}
			for range 1 + rnd.IntN(3) {
				i := rnd.IntN(40)
				st := service(i)
				if rnd.IntN(2) == 0 {
					st = elsewhere(i)
				}
				cur[i] = st
				d.Services[model.ServiceKey{Namespace: "default", Name: fmt.Sprintf("svc%d", i)}] = st
			}
			if rnd.IntN(10) == 0 {
				n := names[rnd.IntN(len(names))]
				d.Nodes = map[string]*model.Node{n: node(n, rnd.IntN(3) != 0)}
			}
		}
		for _, r := range []rig{incremental, whole} {
			r.src.Push(d)
			if _, err := r.loop.Sync(t.Context()); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
		}
		for i := range incremental.anns {
			if len(whole.anns[i].Current()) > 0 {
				announcing[i]++
			}
			if diff := cmp.Diff(whole.anns[i].Current(), incremental.anns[i].Current(), cmpopts.EquateComparable(netip.Addr{})); diff != "" {
				t.Fatalf("step %d, announcer %d: incremental election (-whole +incremental):\n%s", step, i, diff)
			}
		}
	}
	t.Logf("steps announcing something (layer 2, BGP, with nodes): %v", announcing)
	for i, n := range announcing {
		if n < 100 {
			t.Errorf("announcer %d announced something in %d of 300 steps, want 100 or more: the test compares too little", i, n)
		}
	}
}
