package reconcile

import (
	"net/netip"
	"slices"

	"github.com/switchyard-lb/switchyard/core/election"
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
)

// electionInfo is what election needs of a Service beyond its plan:
// its externalTrafficPolicy and the nodes running a ready endpoint.
type electionInfo struct {
	policy     model.TrafficPolicy
	readyNodes map[string]bool
}

// electionInfoOf derives a Service's electionInfo from the watch's view.
func electionInfoOf(st model.ServiceState) electionInfo {
	info := electionInfo{policy: st.Service.ExternalTrafficPolicy}
	for _, e := range st.Endpoints {
		if e.Ready && e.NodeName != "" {
			if info.readyNodes == nil {
				info.readyNodes = make(map[string]bool)
			}
			info.readyNodes[e.NodeName] = true
		}
	}
	return info
}

// elect returns the announcements of want (sorted) that self makes
// through ea: those of addresses ea serves and self wins among nodes.
// Services missing from infos elect as Cluster Services without ready
// endpoints. With ea.WithNodes each announcement carries the nodes that
// serve its address. It is pure: the same inputs give the same set on
// every node.
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
		in := &election.Input{Selector: ea.Selector, TrafficPolicy: info.policy, Alive: alive}
		for _, name := range names {
			in.Nodes = append(in.Nodes, election.CandidateFrom(nodes[name], info.readyNodes[name]))
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
		serving := servingNodes(out, want, input)
		for i := range out {
			out[i].Nodes = serving[out[i].Addr]
		}
	}
	return out
}

// servingNodes returns, for each address announced, the union of the
// nodes eligible for the Services of want sharing it, sorted and never
// nil. The announcements share these slices: they are read-only.
func servingNodes(announced, want []model.Announcement, input func(model.ServiceKey) *election.Input) map[netip.Addr][]string {
	out := make(map[netip.Addr][]string)
	for _, a := range announced {
		out[a.Addr] = nil
	}
	for _, a := range want {
		if names, ok := out[a.Addr]; ok {
			out[a.Addr] = append(names, election.Eligible(input(a.Service))...)
		}
	}
	for addr, names := range out {
		slices.Sort(names)
		if names = slices.Compact(names); names == nil {
			names = []string{} // asked for, and none: not "unset"
		}
		out[addr] = names
	}
	return out
}
