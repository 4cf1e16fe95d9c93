package modeltest

import (
	"net/netip"

	"github.com/switchyard-lb/switchyard/core/model"
)

// Addr parses s.
func Addr(s string) netip.Addr { return netip.MustParseAddr(s) }

// Addrs parses each of ss; none gives an empty, non-nil slice.
func Addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = Addr(s)
	}
	return out
}

// Prefixes parses each of ss; none gives an empty, non-nil slice.
func Prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// HTTP is the port of the Services the builders return: "http", TCP 80.
var HTTP = model.ServicePort{Name: "http", Protocol: model.TCP, Port: 80}

// BackendPort is the port of the endpoints the builders return.
const BackendPort = 8080

// Ready returns a ready, serving endpoint of port "http" at addr on node.
func Ready(addr, node string) model.Endpoint {
	return model.Endpoint{Addr: Addr(addr), Port: BackendPort, PortName: HTTP.Name, Protocol: HTTP.Protocol,
		NodeName: node, Ready: true, Serving: true}
}

// Terminating returns a serving, terminating endpoint of port "http".
func Terminating(addr, node string) model.Endpoint {
	e := Ready(addr, node)
	e.Ready, e.Terminating = false, true
	return e
}

// Stopped returns a terminating endpoint that no longer serves.
func Stopped(addr, node string) model.Endpoint {
	e := Terminating(addr, node)
	e.Serving = false
	return e
}

// NotReady returns an endpoint that is neither ready nor terminating.
func NotReady(addr, node string) model.Endpoint {
	e := Ready(addr, node)
	e.Ready, e.Serving = false, false
	return e
}

// ClusterIP returns Service key of type ClusterIP with the given cluster
// IPs and port HTTP.
func ClusterIP(key model.ServiceKey, clusterIPs ...string) *model.Service {
	return &model.Service{Key: key, Type: model.ClusterIP, ClusterIPs: Addrs(clusterIPs...),
		Ports: []model.ServicePort{HTTP}}
}

// LoadBalancer returns Service key of type LoadBalancer with the given
// cluster IPs and ingress IPs, and port HTTP on NodePort 30080.
func LoadBalancer(key model.ServiceKey, clusterIPs []string, ingress ...string) *model.Service {
	p := HTTP
	p.NodePort = 30080
	return &model.Service{Key: key, Type: model.LoadBalancer, ClusterIPs: Addrs(clusterIPs...),
		LoadBalancerIPs: Addrs(ingress...), Ports: []model.ServicePort{p}}
}

// State returns svc with its endpoints, as the watch reports them.
func State(svc *model.Service, eps ...model.Endpoint) model.ServiceState {
	return model.ServiceState{Service: svc, Endpoints: eps}
}

// With returns v after edit has changed it, for a builder's value with a
// field or two set inside a table:
//
//	modeltest.With(modeltest.ClusterIP(key, "10.96.0.10"), func(s *model.Service) { s.Scheduler = "mh" })
func With[T any](v *T, edit func(*T)) *T {
	edit(v)
	return v
}
