package model

import (
	"fmt"
	"net/netip"
	"time"
)

// ServiceKey identifies a Service.
type ServiceKey struct {
	Namespace string
	Name      string
}

func (k ServiceKey) String() string { return k.Namespace + "/" + k.Name }

// Compare orders keys by namespace, then name.
func (k ServiceKey) Compare(o ServiceKey) int {
	switch {
	case k.Namespace < o.Namespace:
		return -1
	case k.Namespace > o.Namespace:
		return 1
	case k.Name < o.Name:
		return -1
	case k.Name > o.Name:
		return 1
	}
	return 0
}

// Protocol is a transport protocol a Service port carries.
type Protocol uint8

const (
	TCP Protocol = iota + 1
	UDP
	SCTP
)

func (p Protocol) String() string {
	switch p {
	case TCP:
		return "TCP"
	case UDP:
		return "UDP"
	case SCTP:
		return "SCTP"
	}
	return fmt.Sprintf("Protocol(%d)", uint8(p))
}

// ParseProtocol parses the Kubernetes spelling of a protocol.
func ParseProtocol(s string) (Protocol, error) {
	switch s {
	case "TCP", "":
		return TCP, nil
	case "UDP":
		return UDP, nil
	case "SCTP":
		return SCTP, nil
	}
	return 0, fmt.Errorf("unknown protocol %q", s)
}

// ServiceType is the Kubernetes Service type.
type ServiceType uint8

const (
	ClusterIP ServiceType = iota + 1
	NodePort
	LoadBalancer
	ExternalName
)

func (t ServiceType) String() string {
	switch t {
	case ClusterIP:
		return "ClusterIP"
	case NodePort:
		return "NodePort"
	case LoadBalancer:
		return "LoadBalancer"
	case ExternalName:
		return "ExternalName"
	}
	return fmt.Sprintf("ServiceType(%d)", uint8(t))
}

// TrafficPolicy is the value of externalTrafficPolicy or
// internalTrafficPolicy.
type TrafficPolicy uint8

const (
	// PolicyCluster (the zero value) routes to every usable endpoint.
	PolicyCluster TrafficPolicy = iota
	// PolicyLocal routes only to endpoints on this node.
	PolicyLocal
)

func (p TrafficPolicy) String() string {
	if p == PolicyLocal {
		return "Local"
	}
	return "Cluster"
}

// TrafficDistribution values, as spec.trafficDistribution spells them.
const (
	DistributionPreferClose    = "PreferClose"
	DistributionPreferSameZone = "PreferSameZone"
	DistributionPreferSameNode = "PreferSameNode"
)

// Service is what the planner needs of a Kubernetes Service.
//
// Slices are sorted and deduplicated by the watch layer so that two
// Services built from equal API objects compare equal.
type Service struct {
	Key  ServiceKey
	Type ServiceType

	// ClusterIPs is empty for headless Services.
	ClusterIPs  []netip.Addr
	ExternalIPs []netip.Addr
	// LoadBalancerIPs are the IPs of status.loadBalancer.ingress.
	LoadBalancerIPs          []netip.Addr
	LoadBalancerSourceRanges []netip.Prefix
	// LoadBalancerClass is spec.loadBalancerClass, "" when unset.
	LoadBalancerClass string
	// RequestedIPs are spec.loadBalancerIP plus the addresses of the
	// switchyard.dev/load-balancer-ips annotation.
	RequestedIPs []netip.Addr

	Ports []ServicePort

	ExternalTrafficPolicy TrafficPolicy
	InternalTrafficPolicy TrafficPolicy
	// HealthCheckNodePort is set for LoadBalancer Services with
	// externalTrafficPolicy Local.
	HealthCheckNodePort uint16

	// AffinityTimeout is non-zero when sessionAffinity is ClientIP.
	AffinityTimeout time.Duration

	// TrafficDistribution is spec.trafficDistribution, "" when unset.
	TrafficDistribution string

	// Switchyard annotations.
	Policy       string // switchyard.dev/policy
	PolicyParams string // switchyard.dev/policy-params (JSON)
	Scheduler    string // switchyard.dev/scheduler
	AddressPool  string // switchyard.dev/address-pool
	SharingKey   string // switchyard.dev/allow-shared-ip
	// ForwardingMode is switchyard.dev/forwarding-mode; ForwardingDefault
	// without it (or with a value that does not parse).
	ForwardingMode ForwardingMode
}

// ForwardingMode is how traffic to a Service's LoadBalancer and external
// IPs reaches its endpoints.
type ForwardingMode uint8

const (
	// ForwardingDefault leaves the choice to the cluster's default
	// (dataplane.forwardingMode).
	ForwardingDefault ForwardingMode = iota
	// ForwardingNAT: the node receiving a flow balances it over the
	// endpoints.
	ForwardingNAT
	// ForwardingDSR: every node hashes a flow to the same backend node,
	// which serves it and replies directly (docs/dsr.md).
	ForwardingDSR
)

func (m ForwardingMode) String() string {
	switch m {
	case ForwardingDefault:
		return "default"
	case ForwardingNAT:
		return "nat"
	case ForwardingDSR:
		return "dsr"
	}
	return fmt.Sprintf("ForwardingMode(%d)", uint8(m))
}

// ParseForwardingMode parses "nat" or "dsr".
func ParseForwardingMode(s string) (ForwardingMode, error) {
	switch s {
	case "nat":
		return ForwardingNAT, nil
	case "dsr":
		return ForwardingDSR, nil
	}
	return ForwardingDefault, fmt.Errorf("unknown forwarding mode %q (want nat or dsr)", s)
}

// ServicePort is one port of a Service.
type ServicePort struct {
	Name     string
	Protocol Protocol
	Port     uint16
	// NodePort is 0 when the Service has no node port for this port.
	NodePort uint16
}

// Endpoint is one address of an EndpointSlice, with the port resolved for
// one ServicePort (matched by port name and protocol).
type Endpoint struct {
	Addr     netip.Addr
	Port     uint16
	PortName string
	Protocol Protocol

	// NodeName and Zone are "" when the slice does not say.
	NodeName string
	Zone     string

	// Conditions, with Kubernetes' defaulting already applied: a nil
	// ready condition is ready, a nil serving condition equals ready, a
	// nil terminating condition is false.
	Ready       bool
	Serving     bool
	Terminating bool

	// Hints from the EndpointSlice (for topology-aware routing).
	HintZones []string
	HintNodes []string
}

// EndpointKey identifies an endpoint of a Service port.
type EndpointKey struct {
	Addr     netip.Addr
	Port     uint16
	Protocol Protocol
}

// Key returns the endpoint's identity.
func (e Endpoint) Key() EndpointKey { return EndpointKey{e.Addr, e.Port, e.Protocol} }

// Node is what Switchyard needs of a Node: the planner of this node, the
// election, membership and announcers of every node.
type Node struct {
	Name string
	// Zone is the topology.kubernetes.io/zone label, "" when unset.
	Zone string
	// Addresses are the node's addresses that may carry NodePorts: its
	// InternalIP and ExternalIP addresses, sorted.
	Addresses []netip.Addr
	// StatusAddresses are every address of the Node's status, of every
	// type, in the Node's order (a Hostname is no IP: see NodeAddress.IP).
	StatusAddresses []NodeAddress
	// PodCIDRs are the Node's spec.podCIDRs (spec.podCIDR when only that
	// is set), in its order: at most one per family. Empty until the
	// node IPAM controller allocates them, or when it allocates none.
	PodCIDRs []netip.Prefix
	Ready    bool
	Labels   map[string]string
	// Deleting is true while the Node is being deleted: it has a
	// deletionTimestamp, or the cluster autoscaler's
	// ToBeDeletedByClusterAutoscaler taint (KEP-3836). /healthz fails
	// then, so that load balancers drain the node first.
	Deleting bool
	// Unschedulable is true while the Node is cordoned, as kubectl
	// cordon and drain leave it: spec.unschedulable, or the
	// node.kubernetes.io/unschedulable taint the node lifecycle
	// controller adds for it.
	Unschedulable bool
	// ShuttingDown is true while the node is shutting down: the
	// kubelet's graceful node shutdown reports it in the Ready
	// condition (False, "node is shutting down"), or an administrator
	// marked the node node.kubernetes.io/out-of-service.
	ShuttingDown bool
}

// NodeAddressType is the type of a Node's address, as Kubernetes names it.
type NodeAddressType string

// The node address types of Kubernetes.
const (
	NodeInternalIP  NodeAddressType = "InternalIP"
	NodeExternalIP  NodeAddressType = "ExternalIP"
	NodeHostname    NodeAddressType = "Hostname"
	NodeInternalDNS NodeAddressType = "InternalDNS"
	NodeExternalDNS NodeAddressType = "ExternalDNS"
)

// NodeAddress is one address of a Node's status.
type NodeAddress struct {
	Type    NodeAddressType
	Address string
}

// IP returns the address as an IP, false when it is none: a Hostname, a
// DNS name, or what core/k8s refuses as a node IP (invalid, zoned or
// IPv4-mapped).
func (a NodeAddress) IP() (netip.Addr, bool) {
	ip, err := netip.ParseAddr(a.Address)
	if err != nil || ip.Zone() != "" || ip.Is4In6() {
		return netip.Addr{}, false
	}
	return ip, true
}

// IPs returns the node's IP addresses of type t, in the Node's order.
func (n *Node) IPs(t NodeAddressType) []netip.Addr {
	var out []netip.Addr
	for _, a := range n.StatusAddresses {
		if ip, ok := a.IP(); ok && a.Type == t {
			out = append(out, ip)
		}
	}
	return out
}

// ServiceState is the watch layer's current view of one Service: the
// Service (nil once deleted) and its endpoints from every EndpointSlice
// (EndpointSlices may exist before or after their Service).
type ServiceState struct {
	Service   *Service
	Endpoints []Endpoint
}

// Delta is what changed in the watched cluster since the previous Delta.
// A Service or Node that changed and then changed back may be absent.
type Delta struct {
	// Services holds the current state of each changed Service.
	Services map[ServiceKey]ServiceState
	// Nodes holds the current state of each changed Node; nil once
	// deleted.
	Nodes map[string]*Node
	// TriggerTimes are the EndpointSlice last-change-trigger-time
	// annotations (endpoints.kubernetes.io/last-change-trigger-time) of
	// the changes in this delta, for network programming latency.
	TriggerTimes []time.Time
	// Received is when the Source received the oldest change in this
	// delta (zero when unknown): with TriggerTimes, it splits a change's
	// latency into the watch and the wait for a sync.
	Received time.Time
}

// Empty reports whether the delta carries no change.
func (d *Delta) Empty() bool {
	return len(d.Services) == 0 && len(d.Nodes) == 0
}
