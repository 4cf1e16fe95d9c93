package plan

import (
	"net/netip"
	"slices"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
)

// Reasons a Service gets no frontend (ServicePlan.Rejected).
const (
	ReasonExternalName = "ExternalName Service: resolved by DNS, not proxied"
	ReasonHeadless     = "headless Service: no cluster IP to proxy"
	// ReasonUnknownType: the watch layer leaves Type zero for a type it
	// does not know, and nothing is proxied rather than guessed.
	ReasonUnknownType = "unknown Service type: not proxied"
)

// family is an IP family; the planner handles each one on its own, as
// kube-proxy runs one proxier per family.
type family uint8

const (
	ipv4 family = iota
	ipv6
	numFamilies
)

func familyOf(a netip.Addr) family {
	if a.Is4() {
		return ipv4
	}
	return ipv6
}

// env is what planning needs of the node and the options, computed once
// per node or options change rather than once per Service.
type env struct {
	nodeName        string
	zone            string
	nodePortAddrs   [numFamilies][]netip.Addr
	scheduler       string
	schedulers      plugin.SchedulerSet
	class           string
	ignoreUnclassed bool
	forwarding      model.ForwardingMode
}

// newEnv derives the planning environment. node may be nil (unknown):
// then no endpoint is local and no address carries NodePorts. opts must be
// normalized.
func newEnv(node *model.Node, opts *Options) env {
	e := env{scheduler: opts.Scheduler, schedulers: opts.Schedulers, class: opts.LoadBalancerClass, ignoreUnclassed: opts.IgnoreUnclassed,
		forwarding: opts.ForwardingMode}
	if node == nil {
		return e
	}
	e.nodeName, e.zone = node.Name, node.Zone
	primary := primaryIPs(node)
	for f := range numFamilies {
		var prefixes []netip.Prefix
		for _, p := range opts.NodePortAddresses {
			if p.IsValid() && familyOf(p.Addr()) == f {
				prefixes = append(prefixes, p)
			}
		}
		if opts.NodePortPrimary {
			// kube-proxy turns "primary" into one single-address CIDR
			// per family that has a primary IP; a family without one
			// has no address here either (primary IPs are InternalIP
			// or ExternalIP addresses, as Node.Addresses).
			prefixes = nil
			if a := primary[f]; a.IsValid() {
				prefixes = []netip.Prefix{netip.PrefixFrom(a, a.BitLen())}
			}
		}
		var addrs []netip.Addr
		for _, a := range node.Addresses {
			if !a.IsValid() || a.IsLoopback() || a.IsUnspecified() || familyOf(a) != f {
				continue
			}
			if len(prefixes) == 0 || slices.ContainsFunc(prefixes, func(p netip.Prefix) bool { return p.Contains(a) }) {
				addrs = append(addrs, a)
			}
		}
		slices.SortFunc(addrs, netip.Addr.Compare)
		e.nodePortAddrs[f] = slices.Compact(addrs)
	}
	return e
}

// primaryIPs returns the node's primary IP of each family, as kube-proxy
// picks its node IPs: the first InternalIP of the family in the Node's
// status, else the first ExternalIP; invalid (zero) when it has neither.
func primaryIPs(node *model.Node) [numFamilies]netip.Addr {
	var out [numFamilies]netip.Addr
	if node == nil {
		return out
	}
	for _, t := range []model.NodeAddressType{model.NodeInternalIP, model.NodeExternalIP} {
		for _, a := range node.IPs(t) {
			if f := familyOf(a); !out[f].IsValid() {
				out[f] = a
			}
		}
	}
	return out
}

// PlanService plans one Service for this node: its frontends with the
// endpoints each may use, its announcements and its health check. svc nil
// yields nil. node nil means the node is unknown: nothing is local and no
// NodePort is planned. opts nil means the defaults. The result shares no
// memory with the arguments.
func PlanService(svc *model.Service, eps []model.Endpoint, node *model.Node, opts *Options) *model.ServicePlan {
	if svc == nil {
		return nil
	}
	if opts == nil {
		opts = &Options{}
	}
	n := opts.normalized()
	e := newEnv(node, &n)
	return e.planService(svc, eps)
}

func (e *env) planService(svc *model.Service, eps []model.Endpoint) *model.ServicePlan {
	sp := &model.ServicePlan{Key: svc.Key}
	switch {
	case svc.Type == model.ExternalName:
		sp.Rejected = ReasonExternalName
		return sp
	case svc.Type != model.ClusterIP && svc.Type != model.NodePort && svc.Type != model.LoadBalancer:
		sp.Rejected = ReasonUnknownType
		return sp
	case len(svc.ClusterIPs) == 0:
		sp.Rejected = ReasonHeadless
		return sp
	}

	scheduler := e.scheduler
	if svc.Scheduler != "" && e.schedulers != nil && e.schedulers.SupportsScheduler(svc.Scheduler) {
		scheduler = svc.Scheduler
	}
	needsHealthCheck := svc.Type == model.LoadBalancer && svc.ExternalTrafficPolicy == model.PolicyLocal &&
		svc.HealthCheckNodePort != 0
	dsr := e.dsr(svc)

	vss := make([]model.VirtualService, 0, e.countFrontends(svc))
	for f := range numFamilies {
		if !slices.ContainsFunc(svc.ClusterIPs, func(a netip.Addr) bool { return a.IsValid() && familyOf(a) == f }) {
			continue // kube-proxy skips a Service in a family it has no cluster IP of
		}
		if needsHealthCheck {
			sp.LocalEndpoints = max(sp.LocalEndpoints, e.localReadyAddrs(eps, f))
		}
		ranges := sourceRanges(svc.LoadBalancerSourceRanges, f)
		for _, port := range svc.Ports {
			if port.Port == 0 || !validProtocol(port.Protocol) {
				continue
			}
			sel := selection{env: e, eps: eps, port: port, fam: f}
			base := model.VirtualService{
				VirtualServiceKey: model.VirtualServiceKey{Port: port.Port, Protocol: port.Protocol},
				PortName:          port.Name,
				Scheduler:         scheduler,
				AffinityTimeout:   svc.AffinityTimeout,
			}
			internalLocal := svc.InternalTrafficPolicy == model.PolicyLocal
			externalLocal := svc.ExternalTrafficPolicy == model.PolicyLocal
			// add appends a frontend using the node-local endpoints (local)
			// or the cluster-wide ones. Only an external frontend is
			// marked Local: cluster traffic limited to local endpoints
			// is still masqueraded as usual.
			add := func(addr netip.Addr, vport uint16, kind model.FrontendKind, local bool, ranges []netip.Prefix) {
				vs := base
				vs.Addr, vs.Port, vs.Kind, vs.Local = addr, vport, kind, local && kind.External()
				vs.SourceRanges = slices.Clone(ranges)
				vs.Destinations = sel.destinations(local)
				if dsr && (kind == model.FrontendLoadBalancer || kind == model.FrontendExternalIP) {
					// dsr (TCP, UDP and SCTP alike, IPv4 and IPv6,
					// over ipip or GUE): this node serves the flows its table
					// hashes here from its own endpoints, keeping the
					// client's address, as externalTrafficPolicy
					// Local does.
					vs.Local = true
					vs.Destinations = sel.destinations(true)
					vs.DSRNodes = sel.dsrNodes()
				}
				if vs.Local && (kind == model.FrontendLoadBalancer || kind == model.FrontendExternalIP) {
					// In-cluster traffic is short-circuited to every
					// endpoint, whatever internalTrafficPolicy says
					// (kube-proxy's UsesClusterEndpoints).
					vs.Internal = sel.destinations(false)
				}
				vss = append(vss, vs)
			}
			for _, a := range svc.ClusterIPs {
				if a.IsValid() && familyOf(a) == f {
					add(a, port.Port, model.FrontendClusterIP, internalLocal, nil)
				}
			}
			if port.NodePort != 0 {
				for _, a := range e.nodePortAddrs[f] {
					add(a, port.NodePort, model.FrontendNodePort, externalLocal, nil)
				}
			}
			for _, a := range svc.LoadBalancerIPs {
				if a.IsValid() && familyOf(a) == f {
					add(a, port.Port, model.FrontendLoadBalancer, externalLocal, ranges)
				}
			}
			for _, a := range svc.ExternalIPs {
				if a.IsValid() && familyOf(a) == f {
					add(a, port.Port, model.FrontendExternalIP, externalLocal, nil)
				}
			}
		}
	}

	// Sort by key; where two frontends share a key (an external IP that is
	// also an ingress IP), keep the lower kind: the LoadBalancer frontend,
	// whose source ranges then still apply.
	slices.SortFunc(vss, func(a, b model.VirtualService) int {
		if c := a.VirtualServiceKey.Compare(b.VirtualServiceKey); c != 0 {
			return c
		}
		return int(a.Kind) - int(b.Kind)
	})
	vss = slices.CompactFunc(vss, func(a, b model.VirtualService) bool {
		return a.VirtualServiceKey == b.VirtualServiceKey
	})
	if len(vss) > 0 {
		sp.VirtualServices = slices.Clip(vss)
	}

	if svc.Type == model.LoadBalancer && e.ours(svc.LoadBalancerClass) {
		for _, vs := range vss {
			if vs.Kind == model.FrontendLoadBalancer {
				sp.Announce = append(sp.Announce, vs.Addr)
			}
		}
		// vss is sorted by address first, so Announce is sorted already.
		sp.Announce = slices.Compact(sp.Announce)
	}
	if needsHealthCheck {
		sp.HealthCheckNodePort = svc.HealthCheckNodePort
	}
	return sp
}

// countFrontends bounds the number of frontends planService builds, so
// that the slice holding them is allocated once.
func (e *env) countFrontends(svc *model.Service) int {
	n := 0
	for f := range numFamilies {
		count := func(addrs []netip.Addr) int {
			c := 0
			for _, a := range addrs {
				if a.IsValid() && familyOf(a) == f {
					c++
				}
			}
			return c
		}
		cluster := count(svc.ClusterIPs)
		if cluster == 0 {
			continue
		}
		perPort := cluster + count(svc.LoadBalancerIPs) + count(svc.ExternalIPs)
		for _, port := range svc.Ports {
			n += perPort
			if port.NodePort != 0 {
				n += len(e.nodePortAddrs[f])
			}
		}
	}
	return n
}

// dsr reports whether svc's LoadBalancer and external IP frontends are
// in dsr mode: its annotation's mode, else the cluster's default.
func (e *env) dsr(svc *model.Service) bool {
	m := svc.ForwardingMode
	if m == model.ForwardingDefault {
		m = e.forwarding
	}
	return m == model.ForwardingDSR
}

// ours reports whether a LoadBalancer Service of this class is ours to
// announce.
func (e *env) ours(class string) bool {
	if class == "" {
		return !e.ignoreUnclassed
	}
	return class == e.class
}

func validProtocol(p model.Protocol) bool {
	return p == model.TCP || p == model.UDP || p == model.SCTP
}

// sourceRanges returns the loadBalancerSourceRanges of family f, masked,
// sorted and deduplicated; nil when there are none or one allows every
// address (a /0), as kube-proxy treats a zero-masked range as "allow any".
func sourceRanges(all []netip.Prefix, f family) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range all {
		if !p.IsValid() || familyOf(p.Addr()) != f {
			continue
		}
		if p.Bits() == 0 {
			return nil
		}
		out = append(out, p.Masked())
	}
	slices.SortFunc(out, netip.Prefix.Compare)
	return slices.Compact(out)
}

// localReadyAddrs counts the distinct addresses of family f among the ready
// endpoints on this node: kube-proxy's health check count, where one pod
// serving two ports counts once and terminating endpoints do not count.
func (e *env) localReadyAddrs(eps []model.Endpoint, f family) int {
	var addrs []netip.Addr
	for i := range eps {
		ep := &eps[i]
		if ep.Ready && e.isLocal(ep) && ep.Addr.IsValid() && familyOf(ep.Addr) == f {
			addrs = append(addrs, ep.Addr)
		}
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	return len(slices.Compact(addrs))
}

func (e *env) isLocal(ep *model.Endpoint) bool {
	return e.nodeName != "" && ep.NodeName == e.nodeName
}
