package k8s

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/switchyard-lb/switchyard/core/model"
)

// Annotations and labels read by the conversion.
const (
	AnnotationPolicy          = "switchyard.dev/policy"
	AnnotationPolicyParams    = "switchyard.dev/policy-params"
	AnnotationScheduler       = "switchyard.dev/scheduler"
	AnnotationLoadBalancerIPs = "switchyard.dev/load-balancer-ips"
	AnnotationAddressPool     = "switchyard.dev/address-pool"
	AnnotationAllowSharedIP   = "switchyard.dev/allow-shared-ip"
	AnnotationForwardingMode  = "switchyard.dev/forwarding-mode"

	// labelServiceName ties an EndpointSlice to its Service.
	labelServiceName = discoveryv1.LabelServiceName
	// annotationTriggerTime is when the change that produced an
	// EndpointSlice's content happened (network programming latency).
	annotationTriggerTime = corev1.EndpointsLastChangeTriggerTime
	labelZone             = corev1.LabelTopologyZone

	// TaintToBeDeleted is the taint the cluster autoscaler puts on a Node
	// it is about to delete (kube-proxy's ToBeDeletedTaint, KEP-3836).
	TaintToBeDeleted = "ToBeDeletedByClusterAutoscaler"
	// ShutdownMessage is what the kubelet's graceful node shutdown puts
	// in the message of the NotReady condition it posts while the node
	// shuts down (its shutdown manager's ShutdownStatus error).
	ShutdownMessage = "node is shutting down"
)

// defaultAffinityTimeout is Kubernetes' sessionAffinity ClientIP timeout
// when the Service does not set one.
const defaultAffinityTimeout = time.Duration(corev1.DefaultClientIPServiceAffinitySeconds) * time.Second

// converter collects the fields it had to skip, so that one malformed
// field costs that field only.
type converter struct {
	problems []error
}

func (c *converter) skip(field, value string, err error) {
	c.problems = append(c.problems, fmt.Errorf("%s %q skipped: %w", field, value, err))
}

// ReasonForwardingModeInvalid is the reason of the Warning Event a
// Service gets when its switchyard.dev/forwarding-mode annotation is
// neither nat nor dsr (Options.OnServiceWarning).
const ReasonForwardingModeInvalid = "ForwardingModeInvalid"

// WarningError is a problem of a Service that the user is told about
// with a Warning Event of its Reason, besides the log.
type WarningError struct {
	Reason string
	Err    error
}

func (e *WarningError) Error() string { return e.Err.Error() }
func (e *WarningError) Unwrap() error { return e.Err }

// addr parses an IP address; it skips zoned and IPv4-mapped IPv6 forms,
// which Kubernetes does not allow either.
func (c *converter) addr(field, s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil:
		c.skip(field, s, err)
		return netip.Addr{}, false
	case a.Zone() != "":
		c.skip(field, s, fmt.Errorf("zoned address"))
		return netip.Addr{}, false
	case a.Is4In6():
		c.skip(field, s, fmt.Errorf("IPv4-mapped IPv6 address"))
		return netip.Addr{}, false
	}
	return a, true
}

func (c *converter) addrs(field string, in []string) []netip.Addr {
	var out []netip.Addr
	for i, s := range in {
		if a, ok := c.addr(fmt.Sprintf("%s[%d]", field, i), strings.TrimSpace(s)); ok {
			out = append(out, a)
		}
	}
	return sortedAddrs(out)
}

func (c *converter) port(field string, p int32) (uint16, bool) {
	if p < 1 || p > 65535 {
		c.skip(field, fmt.Sprint(p), fmt.Errorf("port out of range 1-65535"))
		return 0, false
	}
	return uint16(p), true
}

func sortedAddrs(a []netip.Addr) []netip.Addr {
	if len(a) == 0 {
		return nil
	}
	slices.SortFunc(a, netip.Addr.Compare)
	return slices.Compact(a)
}

func sortedStrings(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	slices.Sort(s)
	return slices.Compact(s)
}

func compareServicePort(a, b model.ServicePort) int {
	return cmp.Or(cmp.Compare(a.Port, b.Port), cmp.Compare(a.Protocol, b.Protocol),
		strings.Compare(a.Name, b.Name), cmp.Compare(a.NodePort, b.NodePort))
}

// compareEndpoint orders endpoints by address, port, protocol, then port
// name: the order of Service endpoints handed out.
func compareEndpoint(a, b model.Endpoint) int {
	return cmp.Or(a.Addr.Compare(b.Addr), cmp.Compare(a.Port, b.Port),
		cmp.Compare(a.Protocol, b.Protocol), strings.Compare(a.PortName, b.PortName))
}

func serviceKeyOf(namespace, name string) model.ServiceKey {
	return model.ServiceKey{Namespace: namespace, Name: name}
}

// convertService converts a Service. Fields that do not parse are left
// out and described in the returned problems.
func convertService(svc *corev1.Service) (*model.Service, []error) {
	var c converter
	spec := &svc.Spec
	s := &model.Service{Key: serviceKeyOf(svc.Namespace, svc.Name)}

	switch spec.Type {
	case corev1.ServiceTypeClusterIP, "":
		s.Type = model.ClusterIP
	case corev1.ServiceTypeNodePort:
		s.Type = model.NodePort
	case corev1.ServiceTypeLoadBalancer:
		s.Type = model.LoadBalancer
	case corev1.ServiceTypeExternalName:
		s.Type = model.ExternalName
	default:
		// Left zero: the planner rejects a type it does not know.
		c.skip("spec.type", string(spec.Type), fmt.Errorf("unknown Service type"))
	}

	clusterIPs := spec.ClusterIPs
	if len(clusterIPs) == 0 && spec.ClusterIP != "" {
		clusterIPs = []string{spec.ClusterIP}
	}
	for i, ip := range clusterIPs {
		if ip == corev1.ClusterIPNone || ip == "" {
			continue // headless
		}
		if a, ok := c.addr(fmt.Sprintf("spec.clusterIPs[%d]", i), ip); ok {
			s.ClusterIPs = append(s.ClusterIPs, a)
		}
	}
	s.ClusterIPs = sortedAddrs(s.ClusterIPs)
	s.ExternalIPs = c.addrs("spec.externalIPs", spec.ExternalIPs)

	for i, ing := range svc.Status.LoadBalancer.Ingress {
		if ing.IP == "" {
			continue // hostname-only ingress
		}
		// As kube-proxy does: an ingress IP in Proxy mode is reached
		// through the load balancer, never delivered to the node.
		if ing.IPMode != nil && *ing.IPMode == corev1.LoadBalancerIPModeProxy {
			continue
		}
		if a, ok := c.addr(fmt.Sprintf("status.loadBalancer.ingress[%d].ip", i), ing.IP); ok {
			s.LoadBalancerIPs = append(s.LoadBalancerIPs, a)
		}
	}
	s.LoadBalancerIPs = sortedAddrs(s.LoadBalancerIPs)

	for i, r := range spec.LoadBalancerSourceRanges {
		r = strings.TrimSpace(r)
		p, err := netip.ParsePrefix(r)
		if err != nil {
			c.skip(fmt.Sprintf("spec.loadBalancerSourceRanges[%d]", i), r, err)
			continue
		}
		s.LoadBalancerSourceRanges = append(s.LoadBalancerSourceRanges, p.Masked())
	}
	if len(s.LoadBalancerSourceRanges) > 0 {
		slices.SortFunc(s.LoadBalancerSourceRanges, netip.Prefix.Compare)
		s.LoadBalancerSourceRanges = slices.Compact(s.LoadBalancerSourceRanges)
	}

	if spec.LoadBalancerClass != nil {
		s.LoadBalancerClass = *spec.LoadBalancerClass
	}

	var requested []netip.Addr
	if spec.LoadBalancerIP != "" {
		if a, ok := c.addr("spec.loadBalancerIP", spec.LoadBalancerIP); ok {
			requested = append(requested, a)
		}
	}
	if v, ok := svc.Annotations[AnnotationLoadBalancerIPs]; ok {
		for ip := range strings.SplitSeq(v, ",") {
			if ip = strings.TrimSpace(ip); ip == "" {
				continue
			}
			if a, ok := c.addr("annotation "+AnnotationLoadBalancerIPs, ip); ok {
				requested = append(requested, a)
			}
		}
	}
	s.RequestedIPs = sortedAddrs(requested)

	for i, p := range spec.Ports {
		proto, err := model.ParseProtocol(string(p.Protocol))
		if err != nil {
			c.skip(fmt.Sprintf("spec.ports[%d].protocol", i), string(p.Protocol), err)
			continue
		}
		port, ok := c.port(fmt.Sprintf("spec.ports[%d].port", i), p.Port)
		if !ok {
			continue
		}
		sp := model.ServicePort{Name: p.Name, Protocol: proto, Port: port}
		if p.NodePort != 0 {
			sp.NodePort, _ = c.port(fmt.Sprintf("spec.ports[%d].nodePort", i), p.NodePort)
		}
		s.Ports = append(s.Ports, sp)
	}
	if len(s.Ports) > 0 {
		slices.SortFunc(s.Ports, compareServicePort)
		s.Ports = slices.Compact(s.Ports)
	}

	if spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
		s.ExternalTrafficPolicy = model.PolicyLocal
	}
	if spec.InternalTrafficPolicy != nil && *spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal {
		s.InternalTrafficPolicy = model.PolicyLocal
	}
	if spec.HealthCheckNodePort != 0 {
		s.HealthCheckNodePort, _ = c.port("spec.healthCheckNodePort", spec.HealthCheckNodePort)
	}

	if spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		s.AffinityTimeout = defaultAffinityTimeout
		if cfg := spec.SessionAffinityConfig; cfg != nil && cfg.ClientIP != nil && cfg.ClientIP.TimeoutSeconds != nil {
			if t := *cfg.ClientIP.TimeoutSeconds; t > 0 {
				s.AffinityTimeout = time.Duration(t) * time.Second
			} else {
				c.skip("spec.sessionAffinityConfig.clientIP.timeoutSeconds", fmt.Sprint(t), fmt.Errorf("not positive"))
			}
		}
	}
	if spec.TrafficDistribution != nil {
		s.TrafficDistribution = *spec.TrafficDistribution
	}

	s.Policy = svc.Annotations[AnnotationPolicy]
	s.PolicyParams = svc.Annotations[AnnotationPolicyParams]
	s.Scheduler = svc.Annotations[AnnotationScheduler]
	s.AddressPool = svc.Annotations[AnnotationAddressPool]
	s.SharingKey = svc.Annotations[AnnotationAllowSharedIP]
	if v, ok := svc.Annotations[AnnotationForwardingMode]; ok {
		// A bad value falls back to the cluster's default.
		m, err := model.ParseForwardingMode(strings.TrimSpace(v))
		if err != nil {
			c.skip("annotation "+AnnotationForwardingMode, v, &WarningError{
				Reason: ReasonForwardingModeInvalid,
				Err:    fmt.Errorf("%w; the Service uses the cluster's default (dataplane.forwardingMode)", err),
			})
		}
		s.ForwardingMode = m
	}
	return s, c.problems
}

// sliceService returns the Service an EndpointSlice belongs to, false
// when the slice carries no service-name label.
func sliceService(slice *discoveryv1.EndpointSlice) (model.ServiceKey, bool) {
	name := slice.Labels[labelServiceName]
	if name == "" {
		return model.ServiceKey{}, false
	}
	return serviceKeyOf(slice.Namespace, name), true
}

// triggerTime parses the slice's last-change-trigger-time annotation; zero
// when absent or malformed.
func triggerTime(slice *discoveryv1.EndpointSlice) time.Time {
	v, ok := slice.Annotations[annotationTriggerTime]
	if !ok {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}
	}
	return t
}

// convertSlice converts one EndpointSlice into one endpoint per (address,
// slice port), with Kubernetes' condition defaults applied, sorted. FQDN
// slices, endpoints whose first address does not parse and ports without
// a number are skipped.
func convertSlice(slice *discoveryv1.EndpointSlice) ([]model.Endpoint, []error) {
	var c converter
	var want4 bool
	switch slice.AddressType {
	case discoveryv1.AddressTypeIPv4:
		want4 = true
	case discoveryv1.AddressTypeIPv6:
	default:
		return nil, nil // FQDN slices carry no IPs to balance over
	}

	type port struct {
		name  string
		proto model.Protocol
		port  uint16
	}
	var ports []port
	for i, p := range slice.Ports {
		if p.Port == nil {
			continue // "all ports": not usable for a Service port
		}
		var pp port
		var ok bool
		if pp.port, ok = c.port(fmt.Sprintf("ports[%d].port", i), *p.Port); !ok {
			continue
		}
		if p.Name != nil {
			pp.name = *p.Name
		}
		pp.proto = model.TCP
		if p.Protocol != nil {
			proto, err := model.ParseProtocol(string(*p.Protocol))
			if err != nil {
				c.skip(fmt.Sprintf("ports[%d].protocol", i), string(*p.Protocol), err)
				continue
			}
			pp.proto = proto
		}
		ports = append(ports, pp)
	}
	if len(ports) == 0 {
		return nil, c.problems
	}

	// Sized once: the tracker keeps this slice for as long as the
	// EndpointSlice lives (growing it by appends left a third unused).
	out := make([]model.Endpoint, 0, len(slice.Endpoints)*len(ports))
	for i, ep := range slice.Endpoints {
		if len(ep.Addresses) == 0 {
			continue
		}
		// Consumers use the first address only (the API says so).
		field := fmt.Sprintf("endpoints[%d].addresses[0]", i)
		a, ok := c.addr(field, ep.Addresses[0])
		if !ok {
			continue
		}
		if a.Is4() != want4 {
			c.skip(field, ep.Addresses[0], fmt.Errorf("not of address type %s", slice.AddressType))
			continue
		}
		base := model.Endpoint{Addr: a, Ready: true, Serving: true}
		if ep.Conditions.Ready != nil {
			base.Ready = *ep.Conditions.Ready
		}
		base.Serving = base.Ready
		if ep.Conditions.Serving != nil {
			base.Serving = *ep.Conditions.Serving
		}
		if ep.Conditions.Terminating != nil {
			base.Terminating = *ep.Conditions.Terminating
		}
		if ep.NodeName != nil {
			base.NodeName = *ep.NodeName
		}
		if ep.Zone != nil {
			base.Zone = *ep.Zone
		}
		if ep.Hints != nil {
			for _, z := range ep.Hints.ForZones {
				base.HintZones = append(base.HintZones, z.Name)
			}
			for _, n := range ep.Hints.ForNodes {
				base.HintNodes = append(base.HintNodes, n.Name)
			}
			base.HintZones = sortedStrings(base.HintZones)
			base.HintNodes = sortedStrings(base.HintNodes)
		}
		for _, p := range ports {
			e := base
			e.Port, e.PortName, e.Protocol = p.port, p.name, p.proto
			out = append(out, e)
		}
	}
	if len(out) == 0 {
		return nil, c.problems
	}
	slices.SortFunc(out, compareEndpoint)
	return out, c.problems
}

// convertNode converts a Node: its zone, every address with its type
// (the InternalIP and ExternalIP ones also as NodePort addresses), its pod
// CIDRs, Ready
// condition, labels, whether it is being deleted (as kube-proxy's
// health server tells: a deletionTimestamp, or the cluster autoscaler's
// taint of any effect), cordoned, or shutting down.
func convertNode(node *corev1.Node) (*model.Node, []error) {
	var c converter
	n := &model.Node{Name: node.Name, Zone: node.Labels[labelZone]}
	for _, a := range node.Status.Addresses {
		n.StatusAddresses = append(n.StatusAddresses, model.NodeAddress{Type: model.NodeAddressType(a.Type), Address: a.Address})
	}
	for i, a := range node.Status.Addresses {
		if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
			continue
		}
		if ip, ok := c.addr(fmt.Sprintf("status.addresses[%d]", i), a.Address); ok {
			n.Addresses = append(n.Addresses, ip)
		}
	}
	n.Addresses = sortedAddrs(n.Addresses)
	podCIDRs := node.Spec.PodCIDRs
	if len(podCIDRs) == 0 && node.Spec.PodCIDR != "" {
		podCIDRs = []string{node.Spec.PodCIDR}
	}
	for i, s := range podCIDRs {
		field := fmt.Sprintf("spec.podCIDRs[%d]", i)
		if p, err := netip.ParsePrefix(s); err != nil {
			c.skip(field, s, err)
		} else if p.Addr().Zone() != "" || p.Addr().Is4In6() {
			c.skip(field, s, fmt.Errorf("zoned or IPv4-mapped address"))
		} else {
			n.PodCIDRs = append(n.PodCIDRs, p.Masked())
		}
	}
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			n.Ready = cond.Status == corev1.ConditionTrue
			n.ShuttingDown = cond.Status == corev1.ConditionFalse && strings.Contains(cond.Message, ShutdownMessage)
		}
	}
	if len(node.Labels) > 0 {
		n.Labels = maps.Clone(node.Labels)
	}
	tainted := func(key string) bool {
		return slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == key })
	}
	n.Deleting = node.DeletionTimestamp != nil || tainted(TaintToBeDeleted)
	n.Unschedulable = node.Spec.Unschedulable || tainted(corev1.TaintNodeUnschedulable)
	n.ShuttingDown = n.ShuttingDown || tainted(corev1.TaintNodeOutOfService)
	return n, c.problems
}
