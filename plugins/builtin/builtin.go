package builtin

import (
	"context"
	"slices"

	"github.com/switchyard-lb/switchyard/core/plugin"
)

// Names of the built-in policies.
const (
	UniformName       = "uniform"
	LocalFirstName    = "local-first"
	TopologyAwareName = "topology-aware"
)

// The built-in policies never read statistics (plugin.StatsBlind), and
// the evaluation deadline does not fail them (plugin.Builtin).
var (
	_ plugin.StatsBlind = Uniform{}
	_ plugin.StatsBlind = LocalFirst{}
	_ plugin.StatsBlind = TopologyAware{}
	_ plugin.Builtin    = Uniform{}
	_ plugin.Builtin    = LocalFirst{}
	_ plugin.Builtin    = TopologyAware{}
)

// Lookup returns the built-in policy called name.
func Lookup(name string) (plugin.Policy, bool) {
	switch name {
	case UniformName:
		return Uniform{}, true
	case LocalFirstName:
		return LocalFirst{}, true
	case TopologyAwareName:
		return TopologyAware{}, true
	}
	return nil, false
}

// Names lists the built-in policies.
func Names() []string { return []string{LocalFirstName, TopologyAwareName, UniformName} }

// Uniform gives weight 1 to every usable endpoint and 0 to the others.
// Ready endpoints are usable; when none is, serving terminating endpoints
// are (as kube-proxy falls back to them).
type Uniform struct{}

func (Uniform) Name() string { return UniformName }

// IgnoresStats: its decisions never read the live statistics.
func (Uniform) IgnoresStats() bool { return true }

// Builtin: a late return is a busy node's, not a runaway policy's.
func (Uniform) Builtin() bool { return true }

func (Uniform) Evaluate(_ context.Context, in *plugin.PolicyInput) (plugin.PolicyResult, error) {
	return weigh(in, usable(in), nil), nil
}

// LocalFirst sends traffic only to usable endpoints on this node when
// there is one, else to every usable endpoint.
type LocalFirst struct{}

func (LocalFirst) Name() string { return LocalFirstName }

// IgnoresStats: its decisions never read the live statistics.
func (LocalFirst) IgnoresStats() bool { return true }

// Builtin: a late return is a busy node's, not a runaway policy's.
func (LocalFirst) Builtin() bool { return true }

func (LocalFirst) Evaluate(_ context.Context, in *plugin.PolicyInput) (plugin.PolicyResult, error) {
	return weigh(in, usable(in), func(ep *plugin.PolicyEndpoint) bool { return ep.Local }), nil
}

// TopologyAware keeps traffic in this node's zone. When every usable
// endpoint carries zone hints (EndpointSlice forZones), it follows them
// as kube-proxy does: endpoints hinted for this zone. Otherwise it
// prefers endpoints in the same zone. When the preferred set is empty, or
// the node's zone is unknown, every usable endpoint gets traffic.
type TopologyAware struct{}

func (TopologyAware) Name() string { return TopologyAwareName }

// IgnoresStats: its decisions never read the live statistics.
func (TopologyAware) IgnoresStats() bool { return true }

// Builtin: a late return is a busy node's, not a runaway policy's.
func (TopologyAware) Builtin() bool { return true }

func (TopologyAware) Evaluate(_ context.Context, in *plugin.PolicyInput) (plugin.PolicyResult, error) {
	ok := usable(in)
	zone := ""
	if in.Node != nil {
		zone = in.Node.Zone
	}
	if zone == "" {
		return weigh(in, ok, nil), nil
	}
	hinted := true
	for i := range in.Endpoints {
		if ok[i] && len(in.Endpoints[i].HintZones) == 0 {
			hinted = false
			break
		}
	}
	prefer := func(ep *plugin.PolicyEndpoint) bool { return ep.SameZone }
	if hinted {
		prefer = func(ep *plugin.PolicyEndpoint) bool { return slices.Contains(ep.HintZones, zone) }
	}
	return weigh(in, ok, prefer), nil
}

// usable marks the endpoints that may get traffic: the ready ones, or
// when none is ready, the serving terminating ones.
func usable(in *plugin.PolicyInput) []bool {
	ok := make([]bool, len(in.Endpoints))
	found := false
	for i := range in.Endpoints {
		ok[i] = in.Endpoints[i].Ready
		found = found || ok[i]
	}
	if !found {
		for i := range in.Endpoints {
			ep := &in.Endpoints[i]
			ok[i] = ep.Serving && ep.Terminating
		}
	}
	return ok
}

// weigh gives weight 1 to the usable endpoints that prefer accepts, or to
// every usable endpoint when prefer is nil or accepts none.
func weigh(in *plugin.PolicyInput, ok []bool, prefer func(*plugin.PolicyEndpoint) bool) plugin.PolicyResult {
	w := make([]uint32, len(in.Endpoints))
	n := 0
	if prefer != nil {
		for i := range in.Endpoints {
			if ok[i] && prefer(&in.Endpoints[i]) {
				w[i] = 1
				n++
			}
		}
	}
	if n == 0 {
		for i := range w {
			if ok[i] {
				w[i] = 1
			}
		}
	}
	return plugin.PolicyResult{Weights: w}
}
