package plan_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/model/modeltest"
	"github.com/switchyard-lb/switchyard/core/plan"
)

var (
	keyA = model.ServiceKey{Namespace: "default", Name: "a"}
	keyB = model.ServiceKey{Namespace: "default", Name: "b"}
	keyC = model.ServiceKey{Namespace: "default", Name: "c"}
	keyD = model.ServiceKey{Namespace: "other", Name: "d"}
)

// stateA: ClusterIP. stateB: NodePort with both traffic policies Local.
// stateC: LoadBalancer whose endpoints carry zone hints.
func stateA(eps ...model.Endpoint) model.ServiceState {
	s := modeltest.ClusterIP(webKey, "10.96.0.1")
	s.Key = keyA
	return model.ServiceState{Service: s, Endpoints: eps}
}

func stateB(eps ...model.Endpoint) model.ServiceState {
	return model.ServiceState{Service: &model.Service{Key: keyB, Type: model.NodePort, ClusterIPs: modeltest.Addrs("10.96.0.2"),
		ExternalTrafficPolicy: model.PolicyLocal, InternalTrafficPolicy: model.PolicyLocal,
		Ports: []model.ServicePort{{Name: "http", Protocol: model.TCP, Port: 80, NodePort: 30002}}},
		Endpoints: eps}
}

func stateC() model.ServiceState {
	s := modeltest.LoadBalancer(webKey, []string{"10.96.0.3"}, "198.51.100.3")
	s.Key = keyC
	return model.ServiceState{Service: s, Endpoints: []model.Endpoint{
		zoneHints(modeltest.Ready("10.0.3.1", "n3"), "z1"),
		zoneHints(modeltest.Ready("10.0.3.2", "n4"), "z2"),
	}}
}

func deleted() model.ServiceState { return model.ServiceState{} }

// reference plans everything from scratch with PlanService and
// Arbitrate: what the incremental Planner must always agree with.
type reference struct {
	node   *model.Node
	opts   plan.Options
	states map[model.ServiceKey]model.ServiceState
}

func (r *reference) plan() map[model.ServiceKey]*model.ServicePlan {
	out := make(map[model.ServiceKey]*model.ServicePlan)
	for k, st := range r.states {
		out[k] = plan.PlanService(st.Service, st.Endpoints, r.node, &r.opts)
	}
	return plan.Arbitrate(out)
}

func (r *reference) update(node *model.Node, services map[model.ServiceKey]model.ServiceState) {
	if node != nil {
		r.node = node
	}
	for k, st := range services {
		if st.Service == nil {
			delete(r.states, k)
		} else {
			r.states[k] = st
		}
	}
}

func TestPlannerUpdate(t *testing.T) {
	n1 := func() *model.Node {
		return &model.Node{Name: "n1", Zone: "z1", Addresses: modeltest.Addrs("192.168.0.1", "192.168.0.2"), Ready: true}
	}
	type step struct {
		name     string
		node     *model.Node
		services map[model.ServiceKey]model.ServiceState
		// setOptions, when set, calls SetOptions(*setOptions) instead of Update.
		setOptions *plan.Options
		want       []model.ServiceKey
	}
	steps := []step{
		{
			name:     "before the node is known",
			services: map[model.ServiceKey]model.ServiceState{keyA: stateA(modeltest.Ready("10.0.1.1", "n1")), keyB: stateB(modeltest.Ready("10.0.2.1", "n1"))},
			want:     []model.ServiceKey{keyA, keyB},
		},
		{
			name:     "node arrives with a new Service",
			node:     n1(),
			services: map[model.ServiceKey]model.ServiceState{keyC: stateC()},
			want:     []model.ServiceKey{keyB, keyC}, // b gains NodePorts and its local endpoint
		},
		{
			name:     "unchanged re-report",
			node:     n1(),
			services: map[model.ServiceKey]model.ServiceState{keyA: stateA(modeltest.Ready("10.0.1.1", "n1")), keyC: stateC()},
		},
		{
			name:     "endpoint added",
			services: map[model.ServiceKey]model.ServiceState{keyA: stateA(modeltest.Ready("10.0.1.1", "n1"), modeltest.Ready("10.0.1.2", "n2"))},
			want:     []model.ServiceKey{keyA},
		},
		{
			name: "endpoint change that leaves the plan alone",
			services: map[model.ServiceKey]model.ServiceState{
				keyA: stateA(modeltest.Ready("10.0.1.1", "n1"), modeltest.Ready("10.0.1.2", "n2"), modeltest.NotReady("10.0.1.3", "n2")),
				keyB: stateB(modeltest.Ready("10.0.2.1", "n1"), modeltest.Ready("10.0.2.2", "n2")), // remote: unused with ETP and ITP Local
			},
		},
		{
			name: "node readiness and labels do not matter",
			node: func() *model.Node { n := n1(); n.Ready = false; n.Labels = map[string]string{"x": "y"}; return n }(),
		},
		{
			name: "node addresses reordered",
			node: func() *model.Node { n := n1(); n.Addresses = modeltest.Addrs("192.168.0.2", "192.168.0.1"); return n }(),
		},
		{
			name: "nil node keeps the last known node",
		},
		{
			name: "node address added: only Services with NodePorts change",
			node: func() *model.Node {
				n := n1()
				n.Addresses = modeltest.Addrs("192.168.0.1", "192.168.0.2", "192.168.0.3")
				return n
			}(),
			want: []model.ServiceKey{keyB, keyC},
		},
		{
			name: "zone change: only the Service with zone hints changes",
			node: &model.Node{Name: "n1", Zone: "z2", Addresses: modeltest.Addrs("192.168.0.1", "192.168.0.2", "192.168.0.3")},
			want: []model.ServiceKey{keyC},
		},
		{
			name: "name change: only the Service using local endpoints changes",
			node: &model.Node{Name: "n9", Zone: "z2", Addresses: modeltest.Addrs("192.168.0.1", "192.168.0.2", "192.168.0.3")},
			want: []model.ServiceKey{keyB},
		},
		{
			name:     "delete",
			services: map[model.ServiceKey]model.ServiceState{keyA: deleted()},
			want:     []model.ServiceKey{keyA},
		},
		{
			name: "delete of an unknown Service, and endpoints without their Service",
			services: map[model.ServiceKey]model.ServiceState{
				keyA: deleted(),
				keyD: {Endpoints: []model.Endpoint{modeltest.Ready("10.0.4.1", "n1")}},
			},
		},
		{
			name:       "options equal after defaults",
			setOptions: &plan.Options{Scheduler: "rr", LoadBalancerClass: "switchyard.dev/lb"},
		},
		{
			name:       "scheduler option changes every frontend",
			setOptions: &plan.Options{Scheduler: "wlc"},
			want:       []model.ServiceKey{keyB, keyC},
		},
		{
			name:       "IgnoreUnclassed withdraws the announcement",
			setOptions: &plan.Options{Scheduler: "wlc", IgnoreUnclassed: true},
			want:       []model.ServiceKey{keyC},
		},
		{
			name: "node change and a delete in one Update",
			node: &model.Node{Name: "n9", Zone: "z2", Addresses: modeltest.Addrs("192.168.0.1")},
			services: map[model.ServiceKey]model.ServiceState{
				keyB: deleted(),
				keyD: {Service: &model.Service{Key: keyD, Type: model.ExternalName}},
			},
			want: []model.ServiceKey{keyB, keyC, keyD},
		},
		{
			name: "second address",
			node: n9Internal("192.168.0.1", "192.168.0.2"),
			want: []model.ServiceKey{keyC}, // b is gone
		},
		{
			name:       "NodePortPrimary keeps NodePorts on the first InternalIP only",
			setOptions: &plan.Options{Scheduler: "wlc", IgnoreUnclassed: true, NodePortPrimary: true},
			want:       []model.ServiceKey{keyC},
		},
		{
			name: "primary changes with the Node's order while its address set stays",
			node: n9Internal("192.168.0.2", "192.168.0.1"),
			want: []model.ServiceKey{keyC}, // b is gone
		},
		{
			name: "same primary, addresses reported in another order",
			node: func() *model.Node {
				n := n9Internal("192.168.0.2", "192.168.0.1")
				n.Addresses = modeltest.Addrs("192.168.0.2", "192.168.0.1")
				return n
			}(),
		},
	}

	p := plan.New(plan.Options{})
	ref := &reference{states: make(map[model.ServiceKey]model.ServiceState)}
	for _, st := range steps {
		before := make(map[model.ServiceKey]*model.ServicePlan)
		snapshot := make(map[model.ServiceKey]*model.ServicePlan)
		for k, sp := range p.Plan().Services {
			before[k] = sp
			snapshot[k] = clonePlan(sp)
		}

		var got []model.ServiceKey
		if st.setOptions != nil {
			got = p.SetOptions(*st.setOptions)
			ref.opts = *st.setOptions
		} else {
			got = p.Update(st.node, st.services)
			ref.update(st.node, st.services)
		}
		if d := diff(st.want, got); d != "" {
			t.Fatalf("%s: changed keys mismatch (-want +got):\n%s", st.name, d)
		}
		if d := diff(ref.plan(), p.Plan().Services); d != "" {
			t.Fatalf("%s: incremental plan differs from planning from scratch (-want +got):\n%s", st.name, d)
		}
		// Plans handed out before stay intact; unchanged ones are the same.
		for k, sp := range before {
			if d := diff(snapshot[k], sp); d != "" {
				t.Fatalf("%s: earlier plan of %v was modified (-want +got):\n%s", st.name, k, d)
			}
			if now := p.Plan().Services[k]; now != sp && !slices.Contains(got, k) {
				t.Fatalf("%s: plan of %v replaced but not reported", st.name, k)
			}
		}
	}
}

// n9Internal is node n9 in zone z2 whose InternalIPs are addrs, in the
// Node's order.
func n9Internal(addrs ...string) *model.Node {
	n := &model.Node{Name: "n9", Zone: "z2", Addresses: modeltest.Addrs(addrs...)}
	for _, a := range addrs {
		n.StatusAddresses = append(n.StatusAddresses, model.NodeAddress{Type: model.NodeInternalIP, Address: a})
	}
	return n
}

// TestPlannerRandom drives a Planner with random changes and checks after
// each that it agrees with planning from scratch and reports exactly the
// Services whose plan changed.
func TestPlannerRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	nodes := []*model.Node{
		{Name: "n1", Zone: "z1", Addresses: modeltest.Addrs("192.168.0.1", "fd00::1")},
		{Name: "n1", Zone: "z2", Addresses: modeltest.Addrs("192.168.0.1", "fd00::1")},
		{Name: "n2", Zone: "z1", Addresses: modeltest.Addrs("192.168.0.2")},
		nil,
	}
	randomState := func(k model.ServiceKey) model.ServiceState {
		if r.IntN(6) == 0 {
			return deleted()
		}
		i := r.IntN(200)
		svc := modeltest.LoadBalancer(webKey, []string{fmt.Sprintf("10.96.%d.%d", i/100, i%100), "fd96::1"}, fmt.Sprintf("198.51.100.%d", i))
		svc.Key = k
		svc.ExternalTrafficPolicy = model.TrafficPolicy(r.IntN(2))
		svc.InternalTrafficPolicy = model.TrafficPolicy(r.IntN(2))
		svc.HealthCheckNodePort = 32000
		var eps []model.Endpoint
		for j := range r.IntN(5) {
			mk := []func(string, string) model.Endpoint{modeltest.Ready, modeltest.Ready, modeltest.Terminating, modeltest.Stopped, modeltest.NotReady}[r.IntN(5)]
			e := mk(fmt.Sprintf("10.0.%d.%d", i, j), fmt.Sprintf("n%d", 1+r.IntN(3)))
			if r.IntN(2) == 0 {
				e = zoneHints(e, fmt.Sprintf("z%d", 1+r.IntN(2)))
			}
			eps = append(eps, e)
		}
		return model.ServiceState{Service: svc, Endpoints: eps}
	}

	p := plan.New(plan.Options{})
	ref := &reference{states: make(map[model.ServiceKey]model.ServiceState)}
	changedRounds, unchangedRounds, multiKeyRounds := 0, 0, 0
	for round := range 300 {
		prev := ref.plan()
		var node *model.Node
		if r.IntN(10) == 0 {
			node = nodes[r.IntN(len(nodes))]
		}
		services := make(map[model.ServiceKey]model.ServiceState)
		for range r.IntN(4) {
			k := model.ServiceKey{Namespace: "ns", Name: fmt.Sprintf("s%d", r.IntN(20))}
			if st, ok := ref.states[k]; ok && r.IntN(3) == 0 {
				// Re-reported unchanged, as a copy.
				svc := *st.Service
				services[k] = model.ServiceState{Service: &svc, Endpoints: slices.Clone(st.Endpoints)}
				continue
			}
			services[k] = randomState(k)
		}
		got := p.Update(node, services)
		ref.update(node, services)
		now := ref.plan()

		var want []model.ServiceKey
		for k := range 20 {
			key := model.ServiceKey{Namespace: "ns", Name: fmt.Sprintf("s%d", k)}
			if !prev[key].Equal(now[key]) {
				want = append(want, key)
			}
		}
		slices.SortFunc(want, model.ServiceKey.Compare)
		if d := diff(want, got); d != "" {
			t.Fatalf("round %d: changed keys mismatch (-want +got):\n%s", round, d)
		}
		if d := diff(now, p.Plan().Services); d != "" {
			t.Fatalf("round %d: plan mismatch (-want +got):\n%s", round, d)
		}
		switch {
		case len(got) > 1:
			multiKeyRounds++
			changedRounds++
		case len(got) == 1:
			changedRounds++
		case len(services) > 0:
			unchangedRounds++
		}
	}
	// The sequence is seeded: make sure it keeps exercising every case.
	t.Logf("rounds: %d changed (%d several keys), %d with input but no change", changedRounds, multiKeyRounds, unchangedRounds)
	if changedRounds < 100 || multiKeyRounds < 20 || unchangedRounds < 10 {
		t.Errorf("the random sequence exercises too little: %d changed (%d several keys), %d unchanged",
			changedRounds, multiKeyRounds, unchangedRounds)
	}
}

// clonePlan deep-copies a plan, so that a later modification shows.
func clonePlan(sp *model.ServicePlan) *model.ServicePlan {
	c := *sp
	c.Announce = slices.Clone(sp.Announce)
	c.Contested = slices.Clone(sp.Contested)
	c.VirtualServices = nil
	for _, v := range sp.VirtualServices {
		v.Destinations = slices.Clone(v.Destinations)
		v.SourceRanges = slices.Clone(v.SourceRanges)
		v.Flags = slices.Clone(v.Flags)
		c.VirtualServices = append(c.VirtualServices, v)
	}
	return &c
}

// TestPlannerUpdateCostIsFlat checks, without timing, that one endpoint
// change allocates the same whatever the size of the cluster: the work of
// an Update follows what changed.
func TestPlannerUpdateCostIsFlat(t *testing.T) {
	allocs := func(n int) float64 {
		p := plan.New(plan.Options{})
		p.Update(benchNode(), benchCluster(n))
		st := benchService(n / 2)
		changed := model.ServiceState{Service: st.Service, Endpoints: slices.Clone(st.Endpoints)}
		changed.Endpoints[3].Ready = false
		versions := [2]map[model.ServiceKey]model.ServiceState{{st.Service.Key: changed}, {st.Service.Key: st}}
		i := 0
		return testing.AllocsPerRun(100, func() {
			if got := p.Update(nil, versions[i%2]); len(got) != 1 {
				t.Fatalf("Update() = %v, want one key", got)
			}
			i++
		})
	}
	small, large := allocs(100), allocs(5_000)
	if small != large || large > 8 {
		t.Errorf("allocations per endpoint change: %v with 100 Services, %v with 5000; want equal and at most 8", small, large)
	}
}
