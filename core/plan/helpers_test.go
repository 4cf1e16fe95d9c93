package plan_test

import (
	"net/netip"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/switchyard-lb/switchyard/core/model"
)

// Shared fixtures: this node is "n1" in zone "z1"; the Service is
// default/web with one TCP port "http" 80 -> 8080.

var (
	webKey = model.ServiceKey{Namespace: "default", Name: "web"}

	cmpAddrs = cmpopts.EquateComparable(netip.Addr{}, netip.Prefix{})
)

func ip(s string) netip.Addr       { return netip.MustParseAddr(s) }
func prefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func ips(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = ip(s)
	}
	return out
}

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = prefix(s)
	}
	return out
}

func thisNode() *model.Node {
	return &model.Node{Name: "n1", Zone: "z1", Addresses: ips("192.168.0.1", "fd00::1"), Ready: true}
}

var httpPort = model.ServicePort{Name: "http", Protocol: model.TCP, Port: 80}

// clusterIPService returns default/web with the given cluster IPs and the
// http port.
func clusterIPService(clusterIPs ...string) *model.Service {
	return &model.Service{Key: webKey, Type: model.ClusterIP, ClusterIPs: ips(clusterIPs...),
		Ports: []model.ServicePort{httpPort}}
}

// lbService returns default/web of type LoadBalancer with NodePort 30080,
// and the given cluster IPs and ingress IPs.
func lbService(clusterIPs []string, ingress ...string) *model.Service {
	return &model.Service{Key: webKey, Type: model.LoadBalancer, ClusterIPs: ips(clusterIPs...),
		LoadBalancerIPs: ips(ingress...),
		Ports:           []model.ServicePort{{Name: "http", Protocol: model.TCP, Port: 80, NodePort: 30080}}}
}

// ready returns a ready endpoint of the http port on node.
func ready(addr, node string) model.Endpoint {
	return model.Endpoint{Addr: ip(addr), Port: 8080, PortName: "http", Protocol: model.TCP,
		NodeName: node, Ready: true, Serving: true}
}

// terminating returns a serving, terminating endpoint of the http port.
func terminating(addr, node string) model.Endpoint {
	e := ready(addr, node)
	e.Ready, e.Terminating = false, true
	return e
}

// stopped returns a terminating endpoint that no longer serves.
func stopped(addr, node string) model.Endpoint {
	e := terminating(addr, node)
	e.Serving = false
	return e
}

// notReady returns an endpoint that is neither ready nor terminating.
func notReady(addr, node string) model.Endpoint {
	e := ready(addr, node)
	e.Ready, e.Serving = false, false
	return e
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
		out[i] = model.Destination{Addr: ip(a), Port: 8080, Weight: 1}
	}
	return out
}

// vs returns a frontend of the http port with the default scheduler.
func vs(kind model.FrontendKind, addr string, port uint16, d []model.Destination) model.VirtualService {
	return model.VirtualService{
		VirtualServiceKey: model.VirtualServiceKey{Addr: ip(addr), Port: port, Protocol: model.TCP},
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
	v.SourceRanges = prefixes(ranges...)
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
