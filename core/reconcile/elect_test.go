package reconcile

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/switchyard-lb/switchyard/core/election"
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plan"
	"github.com/switchyard-lb/switchyard/core/plugin"
)

// labels is a node selector matching one label.
type labels map[string]string

func (s labels) Matches(l map[string]string) bool {
	for k, v := range s {
		if l[k] != v {
			return false
		}
	}
	return true
}

func TestElect(t *testing.T) {
	web := model.ServiceKey{Namespace: "default", Name: "web"}
	local := model.ServiceKey{Namespace: "default", Name: "local"}
	a1 := model.Announcement{Addr: netip.MustParseAddr("192.0.2.1"), Service: web}
	a2 := model.Announcement{Addr: netip.MustParseAddr("192.0.2.2"), Service: web}
	l3 := model.Announcement{Addr: netip.MustParseAddr("192.0.2.3"), Service: local}
	x9 := model.Announcement{Addr: netip.MustParseAddr("198.51.100.9"), Service: web}
	want := []model.Announcement{a1, a2, l3, x9}
	node := func(name string, ready bool, lb ...string) *model.Node {
		n := &model.Node{Name: name, Ready: ready}
		if len(lb) == 2 {
			n.Labels = map[string]string{lb[0]: lb[1]}
		}
		return n
	}
	two := map[string]*model.Node{"node-a": node("node-a", true), "node-b": node("node-b", true)}
	infos := map[model.ServiceKey]electionInfo{
		web:   {},
		local: {policy: model.PolicyLocal, ready: map[string]int{"node-b": 1}},
	}
	inPool := func(a netip.Addr) bool { return netip.MustParsePrefix("192.0.2.0/24").Contains(a) }
	// The owners the pure election picks among two ready nodes.
	owner := func(a model.Announcement, nodes ...string) string {
		in := &election.Input{}
		for _, n := range nodes {
			in.Nodes = append(in.Nodes, election.Candidate{Name: n, Ready: true})
		}
		o, _ := election.Layer2Owner(in, a.Addr)
		return o
	}
	ownedBy := func(self string, as ...model.Announcement) []model.Announcement {
		out := []model.Announcement{}
		for _, a := range as {
			if owner(a, "node-a", "node-b") == self {
				out = append(out, a)
			}
		}
		return out
	}
	deadB := func(n string) (bool, bool) { return n != "node-b", true }

	tests := []struct {
		name  string
		ea    plugin.ElectedAnnouncer
		self  string
		nodes map[string]*model.Node
		alive election.AliveFunc
		want  []model.Announcement
	}{
		{"bgp: every eligible node announces every served address", plugin.ElectedAnnouncer{Mode: election.BGP},
			"node-a", two, nil, []model.Announcement{a1, a2, x9}},
		{"bgp: ETP Local needs a ready local endpoint", plugin.ElectedAnnouncer{Mode: election.BGP},
			"node-b", two, nil, want},
		{"pools limit the addresses", plugin.ElectedAnnouncer{Mode: election.BGP, Serves: inPool},
			"node-b", two, nil, []model.Announcement{a1, a2, l3}},
		{"layer2: node-a announces what it wins", plugin.ElectedAnnouncer{Mode: election.Layer2},
			"node-a", two, nil, ownedBy("node-a", a1, a2, x9)},
		{"layer2: node-b announces the rest, and the Local Service", plugin.ElectedAnnouncer{Mode: election.Layer2},
			"node-b", two, nil, append(ownedBy("node-b", a1, a2, x9), l3)},
		{"layer2: a NotReady peer owns nothing", plugin.ElectedAnnouncer{Mode: election.Layer2},
			"node-a", map[string]*model.Node{"node-a": node("node-a", true), "node-b": node("node-b", false)}, nil,
			[]model.Announcement{a1, a2, x9}},
		{"layer2: membership overrides readiness", plugin.ElectedAnnouncer{Mode: election.Layer2},
			"node-a", two, deadB, []model.Announcement{a1, a2, x9}},
		{"the node selector excludes self", plugin.ElectedAnnouncer{Mode: election.BGP, Selector: labels{"edge": "true"}},
			"node-a", map[string]*model.Node{"node-a": node("node-a", true), "node-b": node("node-b", true, "edge", "true")}, nil,
			[]model.Announcement{}},
		{"unknown self announces nothing", plugin.ElectedAnnouncer{Mode: election.Layer2},
			"node-c", two, nil, []model.Announcement{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := elect(&tt.ea, tt.self, tt.nodes, infos, tt.alive, want)
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
				t.Errorf("elect (-want +got):\n%s", diff)
			}
		})
	}
}

func TestElectionInfoOf(t *testing.T) {
	svc := &model.Service{ExternalTrafficPolicy: model.PolicyLocal}
	ip := netip.MustParseAddr
	got := electionInfoOf(model.ServiceState{Service: svc, Endpoints: []model.Endpoint{
		{Addr: ip("10.0.0.1"), NodeName: "node-a", Ready: true},
		{Addr: ip("10.0.0.2"), NodeName: "node-a", Ready: true},
		{Addr: ip("10.0.0.3"), NodeName: "node-b", Ready: false, Serving: true, Terminating: true},
		{Addr: ip("10.0.0.4"), NodeName: "", Ready: true},
	}})
	want := electionInfo{policy: model.PolicyLocal, ready: map[string]int{"node-a": 2}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(electionInfo{})); diff != "" {
		t.Errorf("electionInfoOf (-want +got):\n%s", diff)
	}
}

func TestElectWithNodes(t *testing.T) {
	web := model.ServiceKey{Namespace: "default", Name: "web"}
	local := model.ServiceKey{Namespace: "default", Name: "local"}
	shared := model.ServiceKey{Namespace: "default", Name: "shared"}
	addr := netip.MustParseAddr("192.0.2.1")
	outside := netip.MustParseAddr("198.51.100.9")
	node := func(name string, lb ...string) *model.Node {
		n := &model.Node{Name: name, Ready: true}
		if len(lb) == 2 {
			n.Labels = map[string]string{lb[0]: lb[1]}
		}
		return n
	}
	three := map[string]*model.Node{"node-a": node("node-a"), "node-b": node("node-b"), "node-c": node("node-c", "edge", "false")}
	infos := map[model.ServiceKey]electionInfo{
		web:    {ready: map[string]int{"node-c": 1}},
		local:  {policy: model.PolicyLocal, ready: map[string]int{"node-b": 3}},
		shared: {policy: model.PolicyLocal, ready: map[string]int{"node-a": 2, "node-b": 1}},
	}
	// BGP makes every eligible node announce, so self's winning does not
	// depend on the hash; Layer2 is covered by the Local cases, where
	// self is the only eligible node.
	bgp := plugin.ElectedAnnouncer{Mode: election.BGP, WithNodes: true}
	an := func(a netip.Addr, k model.ServiceKey) model.Announcement {
		return model.Announcement{Addr: a, Service: k}
	}
	// to returns the announcement of a to nodes given as name, weight,
	// name, weight...
	to := func(a netip.Addr, k model.ServiceKey, nodes ...any) model.Announcement {
		out := model.Announcement{Addr: a, Service: k, Nodes: []string{}, Weights: []int{}}
		for i := 0; i < len(nodes); i += 2 {
			out.Nodes = append(out.Nodes, nodes[i].(string))
			out.Weights = append(out.Weights, nodes[i+1].(int))
		}
		return out
	}
	tests := []struct {
		name  string
		ea    plugin.ElectedAnnouncer
		self  string
		nodes map[string]*model.Node
		alive election.AliveFunc
		want  []model.Announcement
		in    []model.Announcement
	}{
		{"without WithNodes, Nodes stays nil", plugin.ElectedAnnouncer{Mode: election.BGP}, "node-a", three, nil,
			[]model.Announcement{an(addr, web)}, []model.Announcement{an(addr, web)}},
		{"Cluster: every eligible node, weight 1", bgp, "node-a", three, nil,
			[]model.Announcement{to(addr, web, "node-a", 1, "node-b", 1, "node-c", 1)}, []model.Announcement{an(addr, web)}},
		{"Cluster: a node dead by gossip is left out", bgp, "node-a", three,
			func(n string) (bool, bool) { return n != "node-b", true },
			[]model.Announcement{to(addr, web, "node-a", 1, "node-c", 1)}, []model.Announcement{an(addr, web)}},
		{"Cluster: the node selector limits the nodes", plugin.ElectedAnnouncer{Mode: election.BGP, WithNodes: true, Selector: labels{"edge": "false"}},
			"node-c", three, nil,
			[]model.Announcement{to(addr, web, "node-c", 1)}, []model.Announcement{an(addr, web)}},
		{"Local: only nodes with a ready endpoint, weighed by their ready endpoints", plugin.ElectedAnnouncer{Mode: election.Layer2, WithNodes: true}, "node-b", three, nil,
			[]model.Announcement{to(addr, local, "node-b", 3)}, []model.Announcement{an(addr, local)}},
		{"Local: a node without endpoint announces nothing", plugin.ElectedAnnouncer{Mode: election.Layer2, WithNodes: true}, "node-a", three, nil,
			[]model.Announcement{}, []model.Announcement{an(addr, local)}},
		{"Local: a node dead by gossip is left out", bgp, "node-b", three,
			func(n string) (bool, bool) { return n != "node-a", true },
			[]model.Announcement{to(addr, shared, "node-b", 1)}, []model.Announcement{an(addr, shared)}},
		{"shared address: the union over its Services, each node's largest weight, on each announcement", bgp, "node-b", three, nil,
			[]model.Announcement{to(addr, local, "node-a", 2, "node-b", 3), to(addr, shared, "node-a", 2, "node-b", 3)},
			[]model.Announcement{an(addr, local), an(addr, shared)}},
		{"shared address: a Cluster Service brings every eligible node", bgp, "node-b", three, nil,
			[]model.Announcement{to(addr, local, "node-a", 1, "node-b", 3, "node-c", 1), to(addr, web, "node-a", 1, "node-b", 3, "node-c", 1)},
			[]model.Announcement{an(addr, local), an(addr, web)}},
		{"addresses are unioned separately; unserved ones do not count", plugin.ElectedAnnouncer{Mode: election.BGP, WithNodes: true, Serves: netip.MustParsePrefix("192.0.2.0/24").Contains},
			"node-b", three, nil,
			[]model.Announcement{to(addr, local, "node-b", 3)},
			[]model.Announcement{an(addr, local), an(outside, web)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := elect(&tt.ea, tt.self, tt.nodes, infos, tt.alive, tt.in)
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
				t.Errorf("elect (-want +got):\n%s", diff)
			}
			// Pure: the same inputs give the same answer.
			if again := elect(&tt.ea, tt.self, tt.nodes, infos, tt.alive, tt.in); !cmp.Equal(got, again, cmpopts.EquateComparable(netip.Addr{})) {
				t.Errorf("a second election gave %v, the first %v", again, got)
			}
		})
	}
}

// TestWeightIsTheHealthCheckCount: the weight the owner sends for a node
// of an externalTrafficPolicy Local Service is the count that node's own
// health check reports (its plan's LocalEndpoints), whatever the
// endpoints: the webhook and the health check header never disagree.
func TestWeightIsTheHealthCheckCount(t *testing.T) {
	key := model.ServiceKey{Namespace: "default", Name: "lb"}
	ip := netip.MustParseAddr
	e := func(addr string, port uint16, node string, ready bool) model.Endpoint {
		return model.Endpoint{Addr: ip(addr), Port: port, PortName: "http", Protocol: model.TCP, NodeName: node, Ready: ready, Serving: true}
	}
	sets := map[string][]model.Endpoint{
		"none":                     nil,
		"spread":                   {e("10.1.0.1", 8080, "node-a", true), e("10.1.0.2", 8080, "node-b", true), e("10.1.0.3", 8080, "node-b", true)},
		"not ready and nodeless":   {e("10.1.0.1", 8080, "node-a", false), e("10.1.0.2", 8080, "", true), e("10.1.0.3", 8080, "node-b", true)},
		"one address on two ports": {e("10.1.0.1", 8080, "node-a", true), e("10.1.0.1", 8081, "node-a", true)},
		"dual-stack":               {e("10.1.0.1", 8080, "node-a", true), e("fd00::1", 8080, "node-a", true), e("fd00::2", 8080, "node-a", true)},
	}
	for name, eps := range sets {
		st := model.ServiceState{
			Service: &model.Service{Key: key, Type: model.LoadBalancer,
				ClusterIPs:            []netip.Addr{ip("10.96.0.1"), ip("fd00:96::1")},
				Ports:                 []model.ServicePort{{Name: "http", Protocol: model.TCP, Port: 80, NodePort: 30080}},
				ExternalTrafficPolicy: model.PolicyLocal, HealthCheckNodePort: 32000},
			Endpoints: eps,
		}
		info := electionInfoOf(st)
		for _, node := range []string{"node-a", "node-b", "node-c"} {
			p := plan.New(plan.Options{})
			p.Update(&model.Node{Name: node, Ready: true}, map[model.ServiceKey]model.ServiceState{key: st})
			if got, want := info.weight(node), p.Plan().Services[key].LocalEndpoints; got != want {
				t.Errorf("%s: %s weighs %d, its health check counts %d", name, node, got, want)
			}
		}
	}
}
