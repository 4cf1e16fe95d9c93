package reconcile_test

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/switchyard-lb/switchyard/core/election"
	"github.com/switchyard-lb/switchyard/core/maglev"
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/model/modeltest"
	"github.com/switchyard-lb/switchyard/core/plan"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/core/plugin/plugintest"
	"github.com/switchyard-lb/switchyard/core/reconcile"
	"github.com/switchyard-lb/switchyard/ipvs/dryrun"
)

// dsrRecorder is a goroutine-safe reconcile.DSRDataplane recording the
// plans applied.
type dsrRecorder struct {
	mu    sync.Mutex
	plans []model.DSRPlan
}

func (r *dsrRecorder) Apply(p model.DSRPlan) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.plans = append(r.plans, p)
	return nil
}

func (r *dsrRecorder) last() (model.DSRPlan, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.plans) == 0 {
		return model.DSRPlan{}, 0
	}
	return r.plans[len(r.plans)-1], len(r.plans)
}

// dsrNode is one node's loop with a BGP announcer and a dsr side.
type dsrNode struct {
	name string
	src  *plugintest.Source
	ann  *plugintest.Announcer
	dsr  *dsrRecorder
	loop *reconcile.Loop
}

func newDSRNode(name string) *dsrNode {
	n := &dsrNode{name: name, src: plugintest.NewSource(), ann: plugintest.NewAnnouncer("bgp"), dsr: &dsrRecorder{}}
	n.src.SetSynced(true)
	n.loop = reconcile.New(reconcile.Config{
		NodeName:  name,
		Source:    n.src,
		Planner:   plan.New(plan.Options{}),
		Dataplane: dryrun.New(),
		Elected:   []plugin.ElectedAnnouncer{{Announcer: n.ann, Mode: election.BGP}},
		DSR: &reconcile.DSRConfig{
			Dataplane: n.dsr, Encapsulation: model.IPIP, Seed: 0x5eed, TableSize: 1009, LinkMTU: 1500,
		},
	})
	return n
}

func (n *dsrNode) sync(t *testing.T, d model.Delta) {
	t.Helper()
	n.src.Push(d)
	if _, err := n.loop.Sync(context.Background()); err != nil {
		t.Fatalf("%s: Sync: %v", n.name, err)
	}
}

// owners resolves a plan's only frontend's slots to node names.
func (n *dsrNode) owners(t *testing.T) []string {
	t.Helper()
	p, _ := n.dsr.last()
	if len(p.Frontends) != 1 {
		t.Fatalf("%s: %d dsr frontends, want 1", n.name, len(p.Frontends))
	}
	names := map[uint32]string{0: n.name}
	for _, peer := range p.Peers {
		names[peer.Mark] = peer.Name
	}
	out := make([]string, len(p.Frontends[0].Slots))
	for i, m := range p.Frontends[0].Slots {
		name, ok := names[m]
		if !ok {
			t.Fatalf("%s: slot %d: mark %#x names no peer", n.name, i, m)
		}
		out[i] = name
	}
	return out
}

func dsrClusterNode(name, addr string) *model.Node {
	return &model.Node{Name: name, Ready: true, Addresses: modeltest.Addrs(addr),
		StatusAddresses: []model.NodeAddress{{Type: model.NodeInternalIP, Address: addr}}}
}

// TestLoopDSR runs the loops of three nodes over one dsr Service with
// externalTrafficPolicy Local, endpoints on n1 (two) and n2 (one): every
// node applies the same table (slots resolved to nodes), n1 with twice
// n2's share, and announces the address through BGP, n3 too. A node
// holding no endpoint joining changes no plan (no Apply at all); an
// endpoint on n3 changes the table, moving little beyond n3's share,
// without renumbering n1's and n2's marks; back to nat mode, the dsr side is emptied and n3 withdraws.
func TestLoopDSR(t *testing.T) {
	nodes := map[string]*model.Node{
		"n1": dsrClusterNode("n1", "10.0.1.2"),
		"n2": dsrClusterNode("n2", "10.0.2.2"),
		"n3": dsrClusterNode("n3", "10.0.3.2"),
	}
	svc := lbLocal(lbKey, "10.96.0.20", "192.0.2.7",
		modeltest.Ready("10.1.0.1", "n1"), modeltest.Ready("10.1.0.2", "n1"), modeltest.Ready("10.2.0.1", "n2"))
	svc.Service.ForwardingMode = model.ForwardingDSR
	cluster := []*dsrNode{newDSRNode("n1"), newDSRNode("n2"), newDSRNode("n3")}
	for _, n := range cluster {
		n.sync(t, model.Delta{Nodes: nodes, Services: map[model.ServiceKey]model.ServiceState{lbKey: svc}})
	}
	want := cluster[0].owners(t)
	shares := map[string]int{}
	for _, o := range want {
		shares[o]++
	}
	if shares["n3"] != 0 || shares["n1"] < 600 || shares["n2"] < 300 {
		t.Errorf("shares of 1009 slots %v: want about 2:1 between n1 and n2, none for n3", shares)
	}
	for _, n := range cluster {
		if d := cmp.Diff(want, n.owners(t)); d != "" {
			t.Errorf("%s's table differs from n1's (-n1 +%s):\n%s", n.name, n.name, d)
		}
		if got := n.ann.Current(); len(got) != 1 || got[0].Addr != modeltest.Addr("192.0.2.7") {
			t.Errorf("%s announces %v, want 192.0.2.7 (dsr: every node)", n.name, got)
		}
	}
	p3, applies := cluster[2].dsr.last()
	if p3.Addr != modeltest.Addr("10.0.3.2") || len(p3.Peers) != 2 || p3.MSS != 1440 {
		t.Errorf("n3's plan: address %s, peers %v, MSS %d; want 10.0.3.2, n1 and n2, 1440", p3.Addr, p3.Peers, p3.MSS)
	}

	// n0 joins, holding no endpoint: nothing to apply.
	n3 := cluster[2]
	n3.sync(t, model.Delta{Nodes: map[string]*model.Node{"n0": dsrClusterNode("n0", "10.0.0.2")}})
	if _, got := n3.dsr.last(); got != applies {
		t.Errorf("n0 joined: %d applies, want %d (no change)", got, applies)
	}

	// An endpoint on n3: its table changes, n1 and n2 keep their marks.
	svc.Endpoints = append(slices.Clone(svc.Endpoints), modeltest.Ready("10.3.0.1", "n3"))
	n3.sync(t, model.Delta{Services: map[model.ServiceKey]model.ServiceState{lbKey: svc}})
	p, got := n3.dsr.last()
	if got != applies+1 {
		t.Fatalf("endpoint on n3: %d applies, want %d", got, applies+1)
	}
	if d := cmp.Diff(p3.Peers, p.Peers, cmpopts.EquateComparable(netip.Addr{})); d != "" {
		t.Errorf("peers changed (-before +after):\n%s", d)
	}
	moved := 0
	for i, o := range n3.owners(t) {
		if o != want[i] && o != "n3" {
			moved++
		}
	}
	// Maglev's minimal disruption: beyond n3's own share, a few slots
	// move between the others (the notes' 1-3%).
	if moved > len(want)*3/100 {
		t.Errorf("%d of %d slots moved between n1 and n2 when n3 became a backend, want at most 3%%", moved, len(want))
	}

	// Back to nat: the dsr side is emptied, and n3 (no longer a backend
	// node either: its endpoint goes) withdraws the Local Service.
	svc.Service.ForwardingMode = model.ForwardingNAT
	svc.Endpoints = svc.Endpoints[:3]
	n3.sync(t, model.Delta{Services: map[model.ServiceKey]model.ServiceState{lbKey: svc}})
	if p, _ := n3.dsr.last(); len(p.Frontends) != 0 || len(p.Peers) != 0 {
		t.Errorf("nat again: dsr plan %+v, want no frontend and no peer", p)
	}
	if got := n3.ann.Current(); len(got) != 0 {
		t.Errorf("nat again, ETP Local, no endpoint on n3: n3 announces %v", got)
	}
	_, applies = n3.dsr.last()
	n3.sync(t, model.Delta{Nodes: map[string]*model.Node{"n5": dsrClusterNode("n5", "10.0.5.2")}})
	if _, got := n3.dsr.last(); got != applies {
		t.Errorf("no dsr Service left: %d applies after a node change, want %d", got, applies)
	}
}

// TestLoopDSRTableSizeFixed: the table size is the configured one, not
// one following the node count, which would move almost every flow when
// a node joins.
func TestLoopDSRTableSizeFixed(t *testing.T) {
	if _, err := maglev.SizeFor(3); err != nil {
		t.Fatal(err)
	}
	n := newDSRNode("n1")
	svc := lbLocal(lbKey, "10.96.0.20", "192.0.2.7", modeltest.Ready("10.1.0.1", "n1"))
	svc.Service.ForwardingMode = model.ForwardingDSR
	n.sync(t, model.Delta{Nodes: map[string]*model.Node{"n1": dsrClusterNode("n1", "10.0.1.2")},
		Services: map[model.ServiceKey]model.ServiceState{lbKey: svc}})
	if p, _ := n.dsr.last(); len(p.Frontends) != 1 || len(p.Frontends[0].Slots) != 1009 {
		t.Fatalf("plan %+v: want one frontend of 1009 slots", p)
	}
}

// TestLoopDSRIPv6: a dual-stack dsr Service (IPv4 and IPv6 ingress IPs,
// endpoints of both families on n1 and n2) as n3 plans it. Over ipip its
// IPv6 frontend gets a table like the IPv4 one, tunnelled to the peers'
// IPv6 addresses (ip6ip6) with the IPv6 MSS clamp; a backend node without
// an IPv6 address is left out of the IPv6 table only; when n3 itself
// has none, the IPv6 frontend fails with a clear error and the IPv4 one
// is applied all the same.
func TestLoopDSRIPv6(t *testing.T) {
	node := func(name string, addrs ...string) *model.Node {
		n := &model.Node{Name: name, Ready: true, Addresses: modeltest.Addrs(addrs...)}
		for _, a := range addrs {
			n.StatusAddresses = append(n.StatusAddresses, model.NodeAddress{Type: model.NodeInternalIP, Address: a})
		}
		return n
	}
	svc := model.ServiceState{
		Service: &model.Service{Key: lbKey, Type: model.LoadBalancer, ClusterIPs: modeltest.Addrs("10.96.0.20", "fd00:96::20"),
			LoadBalancerIPs: modeltest.Addrs("192.0.2.7", "2001:db8::7"),
			Ports:           []model.ServicePort{{Name: "http", Protocol: model.TCP, Port: 80}},
			ForwardingMode:  model.ForwardingDSR},
		Endpoints: []model.Endpoint{
			modeltest.Ready("10.1.0.1", "n1"), modeltest.Ready("10.2.0.1", "n2"),
			modeltest.Ready("fd00:1::1", "n1"), modeltest.Ready("fd00:2::1", "n2"),
		},
	}
	v4, v6 := model.VirtualServiceKey{Addr: modeltest.Addr("192.0.2.7"), Port: 80, Protocol: model.TCP},
		model.VirtualServiceKey{Addr: modeltest.Addr("2001:db8::7"), Port: 80, Protocol: model.TCP}
	type peer struct{ Name, Addr, Addr6 string }
	type result struct {
		Addr6     string
		MSS, MSS6 uint16
		Peers     []peer
		// Owners are the nodes holding slots, per frontend.
		Owners map[model.VirtualServiceKey][]string
	}
	for _, tt := range []struct {
		name    string
		nodes   []*model.Node
		wantErr string
		want    result
	}{
		{
			name:  "every node with IPv6",
			nodes: []*model.Node{node("n1", "10.0.1.2", "fd00::12"), node("n2", "10.0.2.2", "fd00::22"), node("n3", "10.0.3.2", "fd00::32")},
			want: result{Addr6: "fd00::32", MSS: 1440, MSS6: 1400,
				Peers:  []peer{{"n1", "10.0.1.2", "fd00::12"}, {"n2", "10.0.2.2", "fd00::22"}},
				Owners: map[model.VirtualServiceKey][]string{v4: {"n1", "n2"}, v6: {"n1", "n2"}}},
		},
		{
			name:  "a backend node without IPv6",
			nodes: []*model.Node{node("n1", "10.0.1.2", "fd00::12"), node("n2", "10.0.2.2"), node("n3", "10.0.3.2", "fd00::32")},
			want: result{Addr6: "fd00::32", MSS: 1440, MSS6: 1400,
				Peers:  []peer{{"n1", "10.0.1.2", "fd00::12"}, {"n2", "10.0.2.2", ""}},
				Owners: map[model.VirtualServiceKey][]string{v4: {"n1", "n2"}, v6: {"n1"}}},
		},
		{
			name:    "this node without IPv6",
			nodes:   []*model.Node{node("n1", "10.0.1.2", "fd00::12"), node("n2", "10.0.2.2", "fd00::22"), node("n3", "10.0.3.2")},
			wantErr: `this node "n3" has no IPv6 address`,
			want: result{MSS: 1440,
				Peers:  []peer{{"n1", "10.0.1.2", ""}, {"n2", "10.0.2.2", ""}},
				Owners: map[model.VirtualServiceKey][]string{v4: {"n1", "n2"}}},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n3 := newDSRNode("n3")
			nodes := map[string]*model.Node{}
			for _, n := range tt.nodes {
				nodes[n.Name] = n
			}
			n3.src.Push(model.Delta{Nodes: nodes, Services: map[model.ServiceKey]model.ServiceState{lbKey: svc}})
			_, err := n3.loop.Sync(context.Background())
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("Sync: %v, want error %q", err, tt.wantErr)
			}
			p, _ := n3.dsr.last()
			got := result{MSS: p.MSS, MSS6: p.MSS6, Owners: map[model.VirtualServiceKey][]string{}}
			if p.Addr6.IsValid() {
				got.Addr6 = p.Addr6.String()
			}
			names := map[uint32]string{0: "n3"}
			for _, pe := range p.Peers {
				names[pe.Mark] = pe.Name
				x := peer{Name: pe.Name, Addr: pe.Addr.String()}
				if pe.Addr6.IsValid() {
					x.Addr6 = pe.Addr6.String()
				}
				got.Peers = append(got.Peers, x)
			}
			for _, f := range p.Frontends {
				seen := map[string]bool{}
				for _, m := range f.Slots {
					seen[names[m]] = true
				}
				got.Owners[f.VirtualServiceKey] = slices.Sorted(maps.Keys(seen))
			}
			if d := cmp.Diff(tt.want, got, cmpopts.EquateComparable(netip.Addr{})); d != "" {
				t.Errorf("n3's dsr plan mismatch (-want +got):\n%s", d)
			}
		})
	}
}

// orderRecorder is a Dataplane (over dryrun) and a DSRDataplane that
// check, at every Apply, that no dsr frontend's table keeps a slot on
// this node (mark 0) while the Dataplane holds no local endpoint of it:
// IPVS refuses the flows hashing there (an ICMP error from a frontend
// without a destination). It records each violation.
type orderRecorder struct {
	mu    sync.Mutex
	dp    *dryrun.Dataplane
	local map[model.VirtualServiceKey]bool // the Dataplane's: a destination of weight > 0
	here  map[model.VirtualServiceKey]bool // the dsr table's: a slot served here
	bad   []string
	dsrs  int
}

func newOrderRecorder() *orderRecorder {
	return &orderRecorder{dp: dryrun.New(), local: map[model.VirtualServiceKey]bool{}, here: map[model.VirtualServiceKey]bool{}}
}

func (r *orderRecorder) Name() string { return "order" }
func (r *orderRecorder) Close() error { return nil }

func (r *orderRecorder) Apply(ctx context.Context, u plugin.Update) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.dp.Apply(ctx, u); err != nil {
		return err
	}
	clear(r.local)
	for _, sp := range u.Plan.Services {
		for _, v := range sp.VirtualServices {
			if v.DSRNodes != nil {
				r.local[v.VirtualServiceKey] = slices.ContainsFunc(v.Destinations, func(d model.Destination) bool { return d.Weight > 0 })
			}
		}
	}
	r.check("dataplane")
	return nil
}

// dsr is the recorder's DSRDataplane side.
func (r *orderRecorder) dsr() reconcile.DSRDataplane { return dsrOrder{r} }

type dsrOrder struct{ r *orderRecorder }

func (d dsrOrder) Apply(p model.DSRPlan) error {
	r := d.r
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dsrs++
	clear(r.here)
	for _, f := range p.Frontends {
		r.here[f.VirtualServiceKey] = len(f.Slots) == 0 || slices.Contains(f.Slots, 0)
	}
	r.check("dsr")
	return nil
}

func (r *orderRecorder) check(after string) {
	for k, here := range r.here {
		if here && !r.local[k] {
			r.bad = append(r.bad, fmt.Sprintf("after the %s apply: %v keeps slots here without a local endpoint", after, k))
		}
	}
}

// TestLoopDSRReleasesSlotsFirst: a node whose last local endpoint of a
// dsr Service leaves hands its slots to the other backend nodes before
// its Dataplane removes the endpoint, and takes slots only once its
// Dataplane holds a local endpoint: at no point does its table keep
// flows on it with no local endpoint to serve them (the layer-2 owner's
// refused connections in the cluster lab's TestDSRLayer2Relief).
func TestLoopDSRReleasesSlotsFirst(t *testing.T) {
	nodes := map[string]*model.Node{
		"n1": dsrClusterNode("n1", "10.0.1.2"),
		"n2": dsrClusterNode("n2", "10.0.2.2"),
		"n3": dsrClusterNode("n3", "10.0.3.2"),
	}
	rec := newOrderRecorder()
	src := plugintest.NewSource()
	src.SetSynced(true)
	loop := reconcile.New(reconcile.Config{
		NodeName: "n1", Source: src, Planner: plan.New(plan.Options{}), Dataplane: rec,
		DSR: &reconcile.DSRConfig{Dataplane: rec.dsr(), Encapsulation: model.IPIP, Seed: 0x5eed, TableSize: 1009, LinkMTU: 1500},
	})
	svc := func(eps ...model.Endpoint) model.ServiceState {
		s := lbLocal(lbKey, "10.96.0.20", "192.0.2.7", eps...)
		s.Service.ForwardingMode = model.ForwardingDSR
		return s
	}
	n1, n2, n3 := modeltest.Ready("10.1.0.1", "n1"), modeltest.Ready("10.2.0.1", "n2"), modeltest.Ready("10.3.0.1", "n3")
	for _, step := range []struct {
		name string
		d    model.Delta
		here bool // n1 serves slots in the end
	}{
		{"n1 and n2 serve", model.Delta{Nodes: nodes, Services: map[model.ServiceKey]model.ServiceState{lbKey: svc(n1, n2)}}, true},
		{"n1's endpoint leaves", model.Delta{Services: map[model.ServiceKey]model.ServiceState{lbKey: svc(n2, n3)}}, false},
		{"n1's endpoint is back", model.Delta{Services: map[model.ServiceKey]model.ServiceState{lbKey: svc(n1, n2, n3)}}, true},
		{"only n1", model.Delta{Services: map[model.ServiceKey]model.ServiceState{lbKey: svc(n1)}}, true},
		{"only n2", model.Delta{Services: map[model.ServiceKey]model.ServiceState{lbKey: svc(n2)}}, false},
	} {
		src.Push(step.d)
		if _, err := loop.Sync(context.Background()); err != nil {
			t.Fatalf("%s: Sync: %v", step.name, err)
		}
		rec.mu.Lock()
		bad, here, dsrs := rec.bad, rec.here, rec.dsrs
		rec.bad = nil
		var got []bool
		for _, h := range here {
			got = append(got, h)
		}
		rec.mu.Unlock()
		for _, b := range bad {
			t.Errorf("%s: %s", step.name, b)
		}
		if d := cmp.Diff([]bool{step.here}, got); dsrs == 0 || d != "" {
			t.Errorf("%s: n1 serves slots of the frontend (-want +got):\n%s", step.name, d)
		}
	}
}
