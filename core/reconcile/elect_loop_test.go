package reconcile_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/switchyard-lb/switchyard/core/election"
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/model/modeltest"
	"github.com/switchyard-lb/switchyard/core/plan"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/core/plugin/plugintest"
	"github.com/switchyard-lb/switchyard/core/reconcile"
	"github.com/switchyard-lb/switchyard/ipvs/dryrun"
)

// fakeMembership is a goroutine-safe AliveFunc: nodes it has not heard
// of are unknown.
type fakeMembership struct {
	mu    sync.Mutex
	alive map[string]bool
}

func (f *fakeMembership) set(node string, alive bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.alive[node] = alive
}

func (f *fakeMembership) Alive(node string) (alive, known bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	alive, known = f.alive[node]
	return alive, known
}

// electedNode is one node's loop with a layer-2 announcer.
type electedNode struct {
	src  *plugintest.Source
	ann  *plugintest.Announcer
	loop *reconcile.Loop
}

func newElectedNode(name string, members *fakeMembership) *electedNode {
	n := &electedNode{src: plugintest.NewSource(), ann: plugintest.NewAnnouncer("cloud")}
	n.src.SetSynced(true)
	n.loop = reconcile.New(reconcile.Config{
		NodeName:  name,
		Source:    n.src,
		Planner:   plan.New(plan.Options{}),
		Dataplane: dryrun.New(),
		Elected: []plugin.ElectedAnnouncer{{
			Announcer: n.ann,
			Mode:      election.Layer2,
			Serves:    netip.MustParsePrefix("192.0.2.0/24").Contains,
		}},
		Alive: members.Alive,
	})
	return n
}

// TestLoopElectsOneLayer2Owner runs the loops of two nodes over the same
// cluster: only the elected node announces the LoadBalancer address,
// an address outside the announcer's pools is announced by nobody, and
// when membership declares the owner dead the other node takes it over.
func TestLoopElectsOneLayer2Owner(t *testing.T) {
	members := &fakeMembership{alive: map[string]bool{}}
	nodes := map[string]*model.Node{
		"node-a": {Name: "node-a", Ready: true, Addresses: []netip.Addr{modeltest.Addr("192.168.1.10")}},
		"node-b": {Name: "node-b", Ready: true, Addresses: []netip.Addr{modeltest.Addr("192.168.1.11")}},
	}
	lb := lbLocal(lbKey, "10.96.0.20", "192.0.2.7", modeltest.Ready("10.1.0.1", "node-a"), modeltest.Ready("10.1.0.2", "node-b"))
	lb.Service.ExternalTrafficPolicy, lb.Service.HealthCheckNodePort = model.PolicyCluster, 0
	other := lbLocal(webKey, "10.96.0.21", "198.51.100.1", modeltest.Ready("10.1.0.3", "node-a"))
	other.Service.ExternalTrafficPolicy, other.Service.HealthCheckNodePort = model.PolicyCluster, 0
	cluster := map[string]*electedNode{"node-a": newElectedNode("node-a", members), "node-b": newElectedNode("node-b", members)}
	syncAll := func() {
		t.Helper()
		for name, n := range cluster {
			if _, err := n.loop.Sync(t.Context()); err != nil {
				t.Fatalf("%s: Sync: %v", name, err)
			}
		}
	}
	for _, n := range cluster {
		n.src.Push(model.Delta{Nodes: nodes, Services: map[model.ServiceKey]model.ServiceState{lbKey: lb, webKey: other}})
	}
	syncAll()

	in := &election.Input{Nodes: []election.Candidate{{Name: "node-a", Ready: true}, {Name: "node-b", Ready: true}}}
	owner, _ := election.Layer2Owner(in, modeltest.Addr("192.0.2.7"))
	standby := "node-a"
	if owner == standby {
		standby = "node-b"
	}
	want := []model.Announcement{announced("192.0.2.7", lbKey)}
	check := func(step, owner string) {
		t.Helper()
		for name, n := range cluster {
			w := []model.Announcement{}
			if name == owner {
				w = want
			}
			if diff := cmp.Diff(w, n.ann.Current(), cmpopts.EquateComparable(netip.Addr{}), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s: %s announces (-want +got):\n%s", step, name, diff)
			}
		}
	}
	check("initially", owner)

	// Membership hears of both: nothing moves.
	members.set("node-a", true)
	members.set("node-b", true)
	syncAll()
	check("both alive", owner)

	// The owner dies: gossip knows before Kubernetes does. Its own loop
	// stops too, so only the standby syncs.
	members.set(owner, false)
	if _, err := cluster[standby].loop.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, cluster[standby].ann.Current(), cmpopts.EquateComparable(netip.Addr{})); diff != "" {
		t.Errorf("after the owner's death the standby announces (-want +got):\n%s", diff)
	}

	// The owner comes back: the address returns to it, and the standby
	// withdraws.
	members.set(owner, true)
	syncAll()
	check("owner back", owner)

	// Kubernetes marks the owner NotReady while membership has no
	// opinion (it forgot the node): readiness decides.
	members.mu.Lock()
	delete(members.alive, owner)
	members.mu.Unlock()
	notReady := *nodes[owner]
	notReady.Ready = false
	for _, n := range cluster {
		n.src.Push(model.Delta{Nodes: map[string]*model.Node{owner: &notReady}})
	}
	syncAll()
	check("owner NotReady", standby)

	// The Service is deleted: its address is withdrawn everywhere.
	for _, n := range cluster {
		n.src.Push(model.Delta{Services: map[model.ServiceKey]model.ServiceState{lbKey: deleted()}})
	}
	syncAll()
	check("deleted", "")
}

// TestLoopReannouncesWhenServingNodesChange: with WithNodes, an
// announcement carries the nodes serving its address and their weights,
// and the announcer is called again when only they change (an endpoint of
// an externalTrafficPolicy Local Service appears on another node, or a
// node's count of ready endpoints changes), and not when nothing did.
func TestLoopReannouncesWhenServingNodesChange(t *testing.T) {
	nodes := map[string]*model.Node{
		"node-a": {Name: "node-a", Ready: true},
		"node-b": {Name: "node-b", Ready: true},
	}
	// An address node-b wins over node-a, so it stays node-b's once
	// node-a becomes eligible too.
	both := &election.Input{Nodes: []election.Candidate{{Name: "node-a", Ready: true}, {Name: "node-b", Ready: true}}}
	var addr netip.Addr
	for i := 1; i < 255 && !addr.IsValid(); i++ {
		a := netip.AddrFrom4([4]byte{192, 0, 2, byte(i)})
		if o, _ := election.Layer2Owner(both, a); o == "node-b" {
			addr = a
		}
	}
	ann := plugintest.NewAnnouncer("cloud")
	src := plugintest.NewSource()
	src.SetSynced(true)
	loop := reconcile.New(reconcile.Config{
		NodeName:  "node-b",
		Source:    src,
		Planner:   plan.New(plan.Options{}),
		Dataplane: dryrun.New(),
		Elected: []plugin.ElectedAnnouncer{{
			Announcer: ann, Mode: election.Layer2, WithNodes: true,
		}},
	})
	to := func(nodes []string, weights ...int) [][]model.Announcement {
		return [][]model.Announcement{{{Addr: addr, Service: lbKey, Nodes: nodes, Weights: weights}}}
	}
	steps := []struct {
		name      string
		push      model.Delta
		wantCalls [][]model.Announcement
	}{
		{"Local, endpoint on node-b only",
			model.Delta{Nodes: nodes, Services: map[model.ServiceKey]model.ServiceState{
				lbKey: lbLocal(lbKey, "10.96.0.20", addr.String(), modeltest.Ready("10.1.0.2", "node-b")),
			}},
			to([]string{"node-b"}, 1)},
		{"an endpoint appears on node-a",
			model.Delta{Services: map[model.ServiceKey]model.ServiceState{
				lbKey: lbLocal(lbKey, "10.96.0.20", addr.String(), modeltest.Ready("10.1.0.1", "node-a"), modeltest.Ready("10.1.0.2", "node-b")),
			}},
			to([]string{"node-a", "node-b"}, 1, 1)},
		{"nothing changes: no call", model.Delta{}, [][]model.Announcement{}},
		{"a second endpoint on node-b: only its weight changes",
			model.Delta{Services: map[model.ServiceKey]model.ServiceState{
				lbKey: lbLocal(lbKey, "10.96.0.20", addr.String(), modeltest.Ready("10.1.0.1", "node-a"), modeltest.Ready("10.1.0.2", "node-b"), modeltest.Ready("10.1.0.3", "node-b")),
			}},
			to([]string{"node-a", "node-b"}, 1, 2)},
		{"the same endpoints again (a resync): no call",
			model.Delta{Services: map[model.ServiceKey]model.ServiceState{
				lbKey: lbLocal(lbKey, "10.96.0.20", addr.String(), modeltest.Ready("10.1.0.1", "node-a"), modeltest.Ready("10.1.0.2", "node-b"), modeltest.Ready("10.1.0.3", "node-b")),
			}},
			[][]model.Announcement{}},
		{"node-a NotReady",
			model.Delta{Nodes: map[string]*model.Node{"node-a": {Name: "node-a"}}},
			to([]string{"node-b"}, 2)},
	}
	for _, s := range steps {
		before := len(ann.Calls())
		src.Push(s.push)
		if _, err := loop.Sync(t.Context()); err != nil {
			t.Fatalf("%s: Sync: %v", s.name, err)
		}
		got := ann.Calls()[before:]
		if diff := cmp.Diff(s.wantCalls, got, cmpopts.EquateComparable(netip.Addr{}), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: announcer calls (-want +got):\n%s", s.name, diff)
		}
	}
}

// reloadable is an announcer's pools and node selector, which a reload
// changes while the loop runs (core/lb's announcerSlot), with its
// Version.
type reloadable struct {
	mu      sync.Mutex
	pool    netip.Prefix
	rack    string // the node selector: label rack=rack; "" selects every node
	version atomic.Uint64
}

func (r *reloadable) set(pool netip.Prefix, rack string) {
	r.mu.Lock()
	r.pool, r.rack = pool, rack
	r.mu.Unlock()
	r.version.Add(1)
}

func (r *reloadable) serves(a netip.Addr) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pool.Contains(a)
}

func (r *reloadable) Matches(l map[string]string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rack == "" || l["rack"] == r.rack
}

// TestIncrementalElectionMatchesWhole feeds the same random changes to
// two loops: one elects again only the addresses a Sync took a change of,
// the other elects everything every time (every Sync is a full one,
// which elects from scratch). Their layer-2, BGP and with-nodes
// announcers must be called with the same sets, withdrawals included,
// after every Sync. Each row mixes in other changes: of the nodes (new,
// gone, readiness, labels), of gossip's view, reloads of the announcers'
// pools and node selectors, of the options, and full resyncs of the
// incremental loop.
func TestIncrementalElectionMatchesWhole(t *testing.T) {
	for _, tc := range []struct {
		name                                  string
		seed                                  uint64
		steps                                 int
		nodes, gossip, reloads, opts, resyncs bool
	}{
		{name: "Services and endpoints", seed: 1, steps: 150},
		{name: "and nodes", seed: 2, steps: 150, nodes: true},
		{name: "and gossip", seed: 3, steps: 150, gossip: true},
		{name: "and reloads", seed: 4, steps: 150, reloads: true},
		{name: "and options and resyncs", seed: 5, steps: 150, opts: true, resyncs: true},
		{name: "everything", seed: 6, steps: 300, nodes: true, gossip: true, reloads: true, opts: true, resyncs: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rnd := rand.New(rand.NewPCG(tc.seed, 2))
			members := &fakeMembership{alive: map[string]bool{}}
			pools := []*reloadable{{pool: netip.MustParsePrefix("198.18.0.0/27")}, {}, {}}
			pools[1].set(netip.MustParsePrefix("198.18.0.0/24"), "r1")
			pools[2].set(netip.MustParsePrefix("198.18.0.16/28"), "")
			type rig struct {
				src  *plugintest.Source
				anns []*plugintest.Announcer
				loop *reconcile.Loop
			}
			newRig := func() rig {
				r := rig{src: plugintest.NewSource()}
				r.src.SetSynced(true)
				var elected []plugin.ElectedAnnouncer
				for i, ea := range []plugin.ElectedAnnouncer{{Mode: election.Layer2}, {Mode: election.BGP}, {Mode: election.Layer2, WithNodes: true}} {
					a := plugintest.NewAnnouncer(fmt.Sprintf("%d", i))
					r.anns = append(r.anns, a)
					ea.Announcer, ea.Serves, ea.Selector, ea.Version = a, pools[i].serves, pools[i], pools[i].version.Load
					elected = append(elected, ea)
				}
				cfg := reconcile.Config{NodeName: "node-a", Source: r.src, Planner: plan.New(plan.Options{}),
					Dataplane: nopDataplane{}, Elected: elected}
				if tc.gossip {
					cfg.Alive = members.Alive
				}
				r.loop = reconcile.New(cfg)
				return r
			}
			incremental, whole := newRig(), newRig()
			names := []string{"node-a", "node-b", "node-c", "node-d"}
			node := func(name string) *model.Node {
				return &model.Node{Name: name, Ready: rnd.IntN(8) != 0, Labels: map[string]string{"rack": fmt.Sprintf("r%d", 1+rnd.IntN(4)/3)},
					Addresses: []netip.Addr{netip.AddrFrom4([4]byte{192, 168, 1, byte(10 + len(name))})}}
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
				if rnd.IntN(6) == 0 {
					svc.ForwardingMode = model.ForwardingDSR // elects as Cluster
				}
				if rnd.IntN(6) == 0 {
					svc.LoadBalancerClass = plan.DefaultLoadBalancerClass
				}
				var eps []model.Endpoint
				for j := range rnd.IntN(4) {
					ready := rnd.IntN(4) != 0
					eps = append(eps, model.Endpoint{Addr: netip.AddrFrom4([4]byte{10, 244, byte(i), byte(j)}), Port: 8080, PortName: "http",
						Protocol: model.TCP, Ready: ready, Serving: ready, NodeName: names[rnd.IntN(len(names))]})
				}
				return model.ServiceState{Service: svc, Endpoints: eps}
			}
			// elsewhere moves the endpoints on other nodes than this one
			// between them (the plan here stays, the election may not),
			// and with churn also flips their readiness and adds one.
			cur := map[int]model.ServiceState{}
			elsewhere := func(i int, churn bool) model.ServiceState {
				st := cur[i]
				if st.Service == nil {
					return service(i)
				}
				eps := slices.Clone(st.Endpoints)
				for j := range eps {
					if eps[j].NodeName != "node-a" {
						eps[j].NodeName = names[1+rnd.IntN(3)]
						if churn {
							eps[j].Ready = rnd.IntN(2) == 0
							eps[j].Serving = eps[j].Ready
						}
					}
				}
				if churn {
					eps = append(eps, model.Endpoint{Addr: netip.AddrFrom4([4]byte{10, 245, byte(i), byte(len(eps))}), Port: 8080, PortName: "http",
						Protocol: model.TCP, Ready: true, Serving: true, NodeName: names[1+rnd.IntN(2)]})
				}
				return model.ServiceState{Service: st.Service, Endpoints: eps}
			}
			first := model.Delta{Services: map[model.ServiceKey]model.ServiceState{}, Nodes: map[string]*model.Node{}}
			for _, n := range names[:3] {
				first.Nodes[n] = node(n)
			}
			first.Nodes["node-a"].Ready, first.Nodes["node-a"].Labels["rack"] = true, "r1"
			for i := range 40 {
				if st := service(i); st.Service != nil {
					first.Services[st.Service.Key] = st
					cur[i] = st
				}
			}
			announcing, withdrawing := make([]int, len(incremental.anns)), make([]int, len(incremental.anns))
			for step := range tc.steps {
				d := first
				if step > 0 {
					d = model.Delta{Services: map[model.ServiceKey]model.ServiceState{}}
					for range rnd.IntN(4) {
						i := rnd.IntN(40)
						st := service(i)
						if r := rnd.IntN(3); r > 0 {
							st = elsewhere(i, r == 1)
						}
						cur[i] = st
						d.Services[model.ServiceKey{Namespace: "default", Name: fmt.Sprintf("svc%d", i)}] = st
					}
					if rnd.IntN(10) == 0 || tc.nodes && rnd.IntN(5) == 0 {
						n := names[rnd.IntN(3)]
						if tc.nodes {
							n = names[rnd.IntN(len(names))]
						}
						d.Nodes = map[string]*model.Node{n: node(n)}
						if tc.nodes && n != "node-a" && rnd.IntN(4) == 0 {
							d.Nodes[n] = nil // gone
						}
					}
				}
				if tc.gossip && rnd.IntN(5) == 0 {
					n := names[rnd.IntN(len(names))]
					if rnd.IntN(3) == 0 {
						members.mu.Lock()
						delete(members.alive, n) // no opinion
						members.mu.Unlock()
					} else {
						members.set(n, rnd.IntN(3) != 0)
					}
				}
				if tc.reloads && rnd.IntN(15) == 0 {
					racks := []string{"", "", "r1", "r2"}
					pools[rnd.IntN(len(pools))].set(netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, 0, byte(rnd.IntN(4) * 8)}), 26+rnd.IntN(3)), racks[rnd.IntN(len(racks))])
				}
				if tc.opts && rnd.IntN(20) == 0 {
					opts := plan.Options{IgnoreUnclassed: rnd.IntN(2) == 0}
					if rnd.IntN(2) == 0 {
						opts.ForwardingMode = model.ForwardingDSR
					}
					incremental.loop.SetOptions(opts)
					whole.loop.SetOptions(opts)
				}
				if tc.resyncs && rnd.IntN(20) == 0 {
					incremental.loop.RequestFull()
				}
				whole.loop.RequestFull()
				before := make([]int, len(incremental.anns))
				had := make([][]model.Announcement, len(incremental.anns))
				for i, a := range incremental.anns {
					had[i] = a.Current()
					before[i] = len(a.Calls())
					if len(whole.anns[i].Calls()) != before[i] {
						t.Fatalf("step %d, announcer %d: %d calls, the whole loop's announcer %d", step, i, before[i], len(whole.anns[i].Calls()))
					}
				}
				for _, r := range []rig{incremental, whole} {
					r.src.Push(d)
					if _, err := r.loop.Sync(t.Context()); err != nil {
						t.Fatalf("step %d: %v", step, err)
					}
				}
				for i := range incremental.anns {
					want, got := whole.anns[i].Calls()[before[i]:], incremental.anns[i].Calls()[before[i]:]
					if diff := cmp.Diff(want, got, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
						t.Fatalf("step %d, announcer %d: incremental election's calls (-whole +incremental):\n%s", step, i, diff)
					}
					if len(whole.anns[i].Current()) > 0 {
						announcing[i]++
					}
					if len(want) > 0 && slices.ContainsFunc(had[i], func(a model.Announcement) bool {
						return !slices.ContainsFunc(want[0], func(b model.Announcement) bool { return a.Addr == b.Addr && a.Service == b.Service })
					}) {
						withdrawing[i]++
					}
				}
			}
			t.Logf("steps announcing something, withdrawing before the dataplane (layer 2, BGP, with nodes): %v, %v", announcing, withdrawing)
			for i := range announcing {
				if announcing[i] < tc.steps/4 || withdrawing[i] < tc.steps/30 {
					t.Errorf("announcer %d announced something in %d of %d steps and withdrew in %d, want a quarter and a thirtieth: the test compares too little",
						i, announcing[i], tc.steps, withdrawing[i])
				}
			}
		})
	}
}
