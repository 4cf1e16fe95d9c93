package reconcile

import (
	"maps"
	"net/netip"
	"slices"

	"github.com/switchyard-lb/switchyard/core/election"
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
)

// electionInfo is what election needs of a Service beyond its plan:
// its externalTrafficPolicy and the ready endpoints on each node.
type electionInfo struct {
	policy model.TrafficPolicy
	ready  map[string]int // model.ReadyPerNode
	// dsr is set when the Service's plan has a dsr frontend: every node
	// forwards its flows to the backend nodes and the client's address
	// is kept, so every eligible node announces it, whatever
	// externalTrafficPolicy says (ECMP over all nodes is dsr's point).
	dsr bool
}

// trafficPolicy is the policy the election applies: Cluster for a dsr
// Service, else its externalTrafficPolicy.
func (info electionInfo) trafficPolicy() model.TrafficPolicy {
	if info.dsr {
		return model.PolicyCluster
	}
	return info.policy
}

// electionInfoOf derives a Service's electionInfo from the watch's view.
func electionInfoOf(st model.ServiceState) electionInfo {
	return electionInfo{policy: st.Service.ExternalTrafficPolicy, ready: model.ReadyPerNode(st.Endpoints)}
}

// weight is node's weight toward an external balancer for the Service,
// when the node is eligible for it (model.Announcement.Weights).
func (info electionInfo) weight(node string) int {
	if info.trafficPolicy() == model.PolicyLocal {
		return info.ready[node]
	}
	return 1
}

// elect returns the announcements of want (sorted) that self makes
// through ea: those of addresses ea serves and self wins among nodes.
// Services missing from infos elect as Cluster Services without ready
// endpoints. With ea.WithNodes each announcement carries the nodes that
// serve its address and their weights. It is pure: the same inputs give
// the same set on every node.
func elect(ea *plugin.ElectedAnnouncer, self string, nodes map[string]*model.Node, infos map[model.ServiceKey]electionInfo, alive election.AliveFunc, want []model.Announcement) []model.Announcement {
	names := make([]string, 0, len(nodes))
	for name := range nodes {
		names = append(names, name)
	}
	slices.Sort(names)
	inputs := make(map[model.ServiceKey]*election.Input)
	input := func(k model.ServiceKey) *election.Input {
		if in, ok := inputs[k]; ok {
			return in
		}
		info := infos[k]
		in := &election.Input{Selector: ea.Selector, TrafficPolicy: info.trafficPolicy(), Alive: alive}
		for _, name := range names {
			in.Nodes = append(in.Nodes, election.CandidateFrom(nodes[name], info.ready[name] > 0))
		}
		inputs[k] = in
		return in
	}
	out := []model.Announcement{}
	for _, a := range want {
		if ea.Serves != nil && !ea.Serves(a.Addr) {
			continue
		}
		if len(election.Announced(ea.Mode, self, input(a.Service), []netip.Addr{a.Addr})) > 0 {
			out = append(out, a)
		}
	}
	if ea.WithNodes && len(out) > 0 {
		serving := servingNodes(out, want, infos, input)
		for i := range out {
			s := serving[out[i].Addr]
			out[i].Nodes, out[i].Weights = s.nodes, s.weights
		}
	}
	return out
}

// serving is the nodes an address's traffic goes to, sorted, and their
// weights (model.Announcement's Nodes and Weights).
type serving struct {
	nodes   []string
	weights []int
}

// servingNodes returns, for each address announced, the union of the
// nodes eligible for the Services of want sharing it, never nil, each
// with the largest weight a Service gives it. The announcements share
// these slices: they are read-only.
func servingNodes(announced, want []model.Announcement, infos map[model.ServiceKey]electionInfo, input func(model.ServiceKey) *election.Input) map[netip.Addr]serving {
	weights := make(map[netip.Addr]map[string]int)
	for _, a := range announced {
		weights[a.Addr] = map[string]int{}
	}
	for _, a := range want {
		w, ok := weights[a.Addr]
		if !ok {
			continue
		}
		info := infos[a.Service]
		for _, name := range election.Eligible(input(a.Service)) {
			w[name] = max(w[name], info.weight(name))
		}
	}
	out := make(map[netip.Addr]serving, len(weights))
	for addr, w := range weights {
		s := serving{nodes: slices.Sorted(maps.Keys(w))}
		if s.nodes == nil {
			s.nodes = []string{} // asked for, and none: not "unset"
		}
		s.weights = make([]int, len(s.nodes))
		for i, name := range s.nodes {
			s.weights[i] = w[name]
		}
		out[addr] = s
	}
	return out
}
