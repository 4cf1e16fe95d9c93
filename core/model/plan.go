package model

import (
	"net/netip"
	"slices"
	"time"
)

// FrontendKind says how a virtual service is reached.
type FrontendKind uint8

const (
	FrontendClusterIP FrontendKind = iota + 1
	FrontendNodePort
	FrontendLoadBalancer
	FrontendExternalIP
)

func (k FrontendKind) String() string {
	switch k {
	case FrontendClusterIP:
		return "ClusterIP"
	case FrontendNodePort:
		return "NodePort"
	case FrontendLoadBalancer:
		return "LoadBalancer"
	case FrontendExternalIP:
		return "ExternalIP"
	}
	return "Unknown"
}

// External reports whether traffic to the frontend comes from outside the
// cluster, so externalTrafficPolicy applies to it.
func (k FrontendKind) External() bool { return k != FrontendClusterIP }

// VirtualServiceKey identifies a virtual service: an IPVS service.
type VirtualServiceKey struct {
	Addr     netip.Addr
	Port     uint16
	Protocol Protocol
}

// Compare orders keys by address, port, then protocol.
func (k VirtualServiceKey) Compare(o VirtualServiceKey) int {
	if c := k.Addr.Compare(o.Addr); c != 0 {
		return c
	}
	if k.Port != o.Port {
		if k.Port < o.Port {
			return -1
		}
		return 1
	}
	if k.Protocol != o.Protocol {
		if k.Protocol < o.Protocol {
			return -1
		}
		return 1
	}
	return 0
}

// VirtualService is one frontend of one Service port, with the real
// servers it balances over.
type VirtualService struct {
	VirtualServiceKey
	Kind     FrontendKind
	PortName string

	// Scheduler is an IPVS scheduler name (rr, wrr, lc, wlc, sh, mh, ...);
	// Flags are its flags (for example "mh-port", "sh-fallback").
	Scheduler string
	Flags     []string

	// AffinityTimeout, when non-zero, makes the service persistent for
	// that long (sessionAffinity ClientIP).
	AffinityTimeout time.Duration

	// Local is set when the frontend keeps the client's source address
	// (externalTrafficPolicy Local on an external frontend): it must not
	// be masqueraded and only node-local endpoints back it.
	Local bool

	// SourceRanges, when non-empty, are the only client prefixes allowed
	// (loadBalancerSourceRanges).
	SourceRanges []netip.Prefix

	// Destinations are sorted by address then port. Empty means the
	// Service has no usable endpoint for this frontend: the dataplane
	// rejects its traffic rather than black-holing it.
	Destinations []Destination

	// Internal, when non-empty, are the real servers of this frontend
	// for traffic from inside the cluster (a pod, the node itself): the
	// cluster-wide endpoints, sorted like Destinations. The planner sets
	// it on Local LoadBalancer and external IP frontends, as kube-proxy
	// sends in-cluster traffic to such an address to any endpoint of the
	// Service (k/k#93456); Destinations keep serving the outside. A
	// dataplane that cannot tell the two apart serves everyone from
	// Destinations.
	Internal []Destination

	// DSRNodes, when non-nil, puts the frontend in dsr mode (docs/dsr.md):
	// it is an external frontend (LoadBalancer or external IP) planned
	// Local, served by this node for the flows its Maglev table hashes
	// here, and DSRNodes are the nodes holding ready endpoints of it,
	// each weighted by their number, sorted by name: the same on every
	// node. Empty (not nil) when no node holds one.
	DSRNodes []NodeWeight
}

// NodeWeight is a node by name and its weight.
type NodeWeight struct {
	Node   string
	Weight uint32
}

// Destination is a real server of a virtual service.
type Destination struct {
	Addr netip.Addr
	Port uint16
	// Weight 0 drains: established connections stay, new ones avoid it.
	Weight uint32
}

// ServicePlan is the desired state derived from one Service.
type ServicePlan struct {
	Key ServiceKey
	// VirtualServices are sorted by key.
	VirtualServices []VirtualService
	// Announce lists the addresses this node should make reachable from
	// outside (LoadBalancer ingress IPs), sorted, before election.
	Announce []netip.Addr
	// HealthCheckNodePort, when non-zero, is the port on which this node
	// answers kube-proxy's health check for the Service, reporting
	// LocalEndpoints.
	HealthCheckNodePort uint16
	LocalEndpoints      int
	// Rejected explains why the Service has no frontend (an ExternalName
	// or headless Service); "" otherwise. A foreign loadBalancerClass is
	// not a rejection: its ingress IPs are proxied, only not announced.
	Rejected string
	// Contested are the virtual services this Service asks for that
	// another Service holds, sorted by key: a virtual service key belongs
	// to one Service of the plan, the lowest ServiceKey asking for it.
	// They are not in VirtualServices.
	Contested []Contest
}

// Contest is a virtual service a Service asks for and Owner holds.
type Contest struct {
	VirtualServiceKey
	Owner ServiceKey
}

// Equal reports whether two plans want the same state.
func (p *ServicePlan) Equal(o *ServicePlan) bool {
	if p == nil || o == nil {
		return p == o
	}
	return p.Key == o.Key && p.HealthCheckNodePort == o.HealthCheckNodePort &&
		p.LocalEndpoints == o.LocalEndpoints && p.Rejected == o.Rejected &&
		slices.Equal(p.Announce, o.Announce) && slices.Equal(p.Contested, o.Contested) &&
		slices.EqualFunc(p.VirtualServices, o.VirtualServices, VirtualService.Equal)
}

// Equal reports whether two virtual services want the same state.
func (v VirtualService) Equal(o VirtualService) bool {
	return v.VirtualServiceKey == o.VirtualServiceKey && v.Kind == o.Kind &&
		v.PortName == o.PortName && v.Scheduler == o.Scheduler &&
		v.AffinityTimeout == o.AffinityTimeout && v.Local == o.Local &&
		slices.Equal(v.Flags, o.Flags) && slices.Equal(v.SourceRanges, o.SourceRanges) &&
		slices.Equal(v.Destinations, o.Destinations) && slices.Equal(v.Internal, o.Internal) &&
		(v.DSRNodes == nil) == (o.DSRNodes == nil) && slices.Equal(v.DSRNodes, o.DSRNodes)
}

// Plan is the node's whole desired state: one ServicePlan per Service.
// A Plan handed to a plugin is read-only for it. A virtual service key is
// in the VirtualServices of at most one of its ServicePlans.
type Plan struct {
	Services map[ServiceKey]*ServicePlan
}

// Announcement asks an announcer to make an address reachable at this node.
type Announcement struct {
	Addr    netip.Addr
	Service ServiceKey
	// Nodes, when non-nil, names the nodes that serve the address's
	// traffic, sorted: the nodes eligible for it over every Service
	// sharing it (with externalTrafficPolicy Local, only nodes running a
	// ready endpoint). It is set only for announcers that ask for it
	// (plugin.ElectedAnnouncer.WithNodes), such as the cloud
	// announcer, which sends traffic to other nodes; nil leaves the
	// choice of nodes to the announcer.
	Nodes []string
	// Weights, set with Nodes, holds each node's weight toward the
	// external balancer (Weights[i] is Nodes[i]'s): the share of new
	// connections it should get, over every Service sharing the address
	// like Nodes. For a Service with externalTrafficPolicy Local it is the
	// node's ready endpoints of it (ReadyPerNode, the count its health
	// check reports); for a Cluster Service, where every node spreads
	// over all endpoints anyway, 1. A node the Services weigh differently
	// gets the largest weight.
	Weights []int
}

// Equal reports whether two announcements ask for the same thing.
func (a Announcement) Equal(o Announcement) bool {
	return a.Addr == o.Addr && a.Service == o.Service &&
		(a.Nodes == nil) == (o.Nodes == nil) && slices.Equal(a.Nodes, o.Nodes) &&
		slices.Equal(a.Weights, o.Weights)
}
