package plan_test

import (
	"net/netip"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/model/modeltest"
)

// Shared fixtures: this node is "n1" in zone "z1"; the Service is
// default/web with one TCP port "http" 80 -> 8080.

var (
	webKey = model.ServiceKey{Namespace: "default", Name: "web"}

	cmpAddrs = cmpopts.EquateComparable(netip.Addr{}, netip.Prefix{})
)

func thisNode() *model.Node {
	return &model.Node{Name: "n1", Zone: "z1", Addresses: modeltest.Addrs("192.168.0.1", "fd00::1"), Ready: true}
}

func zoneHints(e model.Endpoint, zones ...string) model.Endpoint {
	e.HintZones = zones
	return e
}

func nodeHints(e model.Endpoint, nodes ...string) model.Endpoint {
	e.HintNodes = nodes
	return e
}

// dests returns weight-1 destinations on port 8080, in the order given.
func dests(addrs ...string) []model.Destination {
	if len(addrs) == 0 {
		return nil
	}
	out := make([]model.Destination, len(addrs))
	for i, a := range addrs {
		out[i] = model.Destination{Addr: modeltest.Addr(a), Port: 8080, Weight: 1}
	}
	return out
}

// vs returns a frontend of the http port with the default scheduler.
func vs(kind model.FrontendKind, addr string, port uint16, d []model.Destination) model.VirtualService {
	return model.VirtualService{
		VirtualServiceKey: model.VirtualServiceKey{Addr: modeltest.Addr(addr), Port: port, Protocol: model.TCP},
		Kind:              kind, PortName: "http", Scheduler: "rr", Destinations: d,
	}
}

func local(v model.VirtualService) model.VirtualService {
	v.Local = true
	return v
}

func withInternal(v model.VirtualService, d []model.Destination) model.VirtualService {
	v.Internal = d
	return v
}

func withRanges(v model.VirtualService, ranges ...string) model.VirtualService {
	v.SourceRanges = modeltest.Prefixes(ranges...)
	return v
}

func withAffinity(v model.VirtualService, d time.Duration) model.VirtualService {
	v.AffinityTimeout = d
	return v
}

func withScheduler(v model.VirtualService, s string) model.VirtualService {
	v.Scheduler = s
	return v
}

func diff(want, got any) string { return cmp.Diff(want, got, cmpAddrs) }
