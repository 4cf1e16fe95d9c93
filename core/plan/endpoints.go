package plan

import (
	"slices"
	"strings"

	"github.com/switchyard-lb/switchyard/core/model"
)

// topology is how topology hints narrow the cluster-wide endpoints.
type topology uint8

const (
	topologyNone     topology = iota // every ready endpoint
	topologySameZone                 // endpoints hinted for this node's zone
	topologySameNode                 // endpoints hinted for this node
)

// selection picks the endpoints of one Service port in one IP family, as
// kube-proxy's CategorizeEndpoints does. It computes the cluster-wide and
// the node-local destination lists at most once each and hands the first
// caller the list itself and later callers copies, so that no two virtual
// services share memory.
type selection struct {
	env  *env
	eps  []model.Endpoint
	port model.ServicePort
	fam  family

	cluster, local destinationList
}

// destinationList is a destination list computed at most once and handed
// out once as is, then as copies.
type destinationList struct {
	list        []model.Destination
	done, given bool
}

// destinations returns the destinations of a frontend that uses only
// node-local endpoints (local) or the cluster-wide set.
func (s *selection) destinations(local bool) []model.Destination {
	d := &s.cluster
	if local {
		d = &s.local
	}
	if !d.done {
		if local {
			d.list = s.localDestinations()
		} else {
			d.list = s.clusterDestinations()
		}
		d.done = true
	}
	if d.given {
		return slices.Clone(d.list)
	}
	d.given = true
	return d.list
}

// matches reports whether ep serves this selection's port and family.
func (s *selection) matches(ep *model.Endpoint) bool {
	return ep.PortName == s.port.Name && ep.Protocol == s.port.Protocol && ep.Port != 0 &&
		ep.Addr.IsValid() && familyOf(ep.Addr) == s.fam
}

// clusterDestinations: the ready endpoints available under the topology
// the hints allow; when there are none, the serving and terminating ones
// (topology is ignored then: hints are only used when some ready endpoint
// matches them).
func (s *selection) clusterDestinations() []model.Destination {
	mode := s.topology()
	out := s.filter(func(ep *model.Endpoint) bool { return ep.Ready && s.availableFor(ep, mode) })
	if len(out) == 0 {
		out = s.filter(func(ep *model.Endpoint) bool { return ep.Serving && ep.Terminating })
	}
	return out
}

// localDestinations: the ready endpoints on this node; when there are
// none, the serving and terminating ones on this node. Hints do not apply.
func (s *selection) localDestinations() []model.Destination {
	out := s.filter(func(ep *model.Endpoint) bool { return ep.Ready && s.env.isLocal(ep) })
	if len(out) == 0 {
		out = s.filter(func(ep *model.Endpoint) bool { return ep.Serving && ep.Terminating && s.env.isLocal(ep) })
	}
	return out
}

// topology decides from the hints of the ready endpoints: same node when
// every one has a node hint and one names this node; else same zone when
// every one has a zone hint and one names this node's zone; else none.
func (s *selection) topology() topology {
	hasReady := false
	allNode, forNode := true, false
	allZone, forZone := true, false
	for i := range s.eps {
		ep := &s.eps[i]
		if !ep.Ready || !s.matches(ep) {
			continue
		}
		hasReady = true
		if len(ep.HintNodes) == 0 {
			allNode = false
		} else if s.env.nodeName != "" && slices.Contains(ep.HintNodes, s.env.nodeName) {
			forNode = true
		}
		if len(ep.HintZones) == 0 {
			allZone = false
		} else if s.env.zone != "" && slices.Contains(ep.HintZones, s.env.zone) {
			forZone = true
		}
	}
	switch {
	case !hasReady:
		return topologyNone
	case allNode && forNode:
		return topologySameNode
	case allZone && forZone:
		return topologySameZone
	}
	return topologyNone
}

func (s *selection) availableFor(ep *model.Endpoint, mode topology) bool {
	switch mode {
	case topologySameNode:
		return slices.Contains(ep.HintNodes, s.env.nodeName)
	case topologySameZone:
		return slices.Contains(ep.HintZones, s.env.zone)
	}
	return true
}

// filter returns the destinations of the matching endpoints that keep
// holds for, with weight 1, sorted by address then port and deduplicated;
// nil when there are none. It sizes the result exactly: one allocation.
func (s *selection) filter(keep func(*model.Endpoint) bool) []model.Destination {
	n := 0
	for i := range s.eps {
		if ep := &s.eps[i]; s.matches(ep) && keep(ep) {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	out := make([]model.Destination, 0, n)
	for i := range s.eps {
		if ep := &s.eps[i]; s.matches(ep) && keep(ep) {
			out = append(out, model.Destination{Addr: ep.Addr, Port: ep.Port, Weight: 1})
		}
	}
	slices.SortFunc(out, compareDestinations)
	return slices.Compact(out)
}

func compareDestinations(a, b model.Destination) int {
	if c := a.Addr.Compare(b.Addr); c != 0 {
		return c
	}
	return int(a.Port) - int(b.Port)
}

// dsrNodes returns the backend nodes of a dsr frontend: the nodes
// holding a ready endpoint of this port and family, each weighted by its
// distinct ready endpoints, sorted by name; when no endpoint is ready,
// those holding serving and terminating ones. Neither hints nor this
// node enter it, so every node computes the same list. Endpoints whose
// slice names no node cannot be reached through a node and are left out.
// Never nil: empty when no node qualifies.
func (s *selection) dsrNodes() []model.NodeWeight {
	count := func(keep func(*model.Endpoint) bool) []model.NodeWeight {
		seen := map[model.EndpointKey]bool{}
		per := map[string]uint32{}
		for i := range s.eps {
			ep := &s.eps[i]
			if !s.matches(ep) || ep.NodeName == "" || !keep(ep) || seen[ep.Key()] {
				continue
			}
			seen[ep.Key()] = true
			per[ep.NodeName]++
		}
		out := make([]model.NodeWeight, 0, len(per))
		for n, w := range per {
			out = append(out, model.NodeWeight{Node: n, Weight: w})
		}
		slices.SortFunc(out, func(a, b model.NodeWeight) int { return strings.Compare(a.Node, b.Node) })
		return out
	}
	out := count(func(ep *model.Endpoint) bool { return ep.Ready })
	if len(out) == 0 {
		out = count(func(ep *model.Endpoint) bool { return ep.Serving && ep.Terminating })
	}
	return out
}
