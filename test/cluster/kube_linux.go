package cluster

import (
	"context"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/switchyard-lb/switchyard/core/lbipam"
)

// Service port names and numbers: each maps to the pod port of the same
// protocol (Pod* ports).
const (
	PortHTTP = "http" // 80/TCP -> PodHTTPPort
	PortTCP  = "tcp"  // 9000/TCP -> PodTCPPort
	PortUDP  = "udp"  // 9000/UDP -> PodUDPPort
)

var servicePorts = []struct {
	name         string
	proto        corev1.Protocol
	port, target int32
}{
	{PortHTTP, corev1.ProtocolTCP, 80, PodHTTPPort},
	{PortTCP, corev1.ProtocolTCP, 9000, PodTCPPort},
	{PortUDP, corev1.ProtocolUDP, 9000, PodUDPPort},
}

// createNode writes n's Node object: zone and hostname labels, its pod
// CIDRs, its InternalIPs (IPv4 first, the primary, then IPv6) and Ready,
// as the kubelet of a dual-stack node would.
func createNode(ctx context.Context, kube kubernetes.Interface, n *Node) error {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: map[string]string{
			corev1.LabelHostname:         n.Name,
			corev1.LabelTopologyZone:     n.Zone,
			corev1.LabelOSStable:         "linux",
			"switchyard.dev/cluster-lab": "true",
		}},
		Spec: corev1.NodeSpec{PodCIDR: n.PodCIDR.String(), PodCIDRs: []string{n.PodCIDR.String(), n.PodCIDR6.String()}},
	}
	created, err := kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("cluster: create Node %s: %w", n.Name, err)
	}
	created.Status.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: n.Addr.String()},
		{Type: corev1.NodeInternalIP, Address: n.Addr6.String()},
		{Type: corev1.NodeHostName, Address: n.Name},
	}
	created.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "ClusterLab",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
	}}
	if _, err := kube.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("cluster: write Node %s's status: %w", n.Name, err)
	}
	return nil
}

// ServiceSpec is a Service and its endpoints, as CreateService writes
// them.
type ServiceSpec struct {
	Name string
	Type corev1.ServiceType // default ClusterIP
	// ETP is the externalTrafficPolicy of a NodePort or LoadBalancer
	// Service; default Cluster.
	ETP corev1.ServiceExternalTrafficPolicy
	// Pool is the address pool of a LoadBalancer Service (PoolL2,
	// PoolBGP), set as its switchyard.dev/address-pool annotation; no
	// pool assigns automatically. WaitLoadBalancerIP waits for the
	// address.
	Pool      string
	Endpoints []Endpoint
	// ExternalIPs are the Service's spec.externalIPs.
	ExternalIPs []netip.Addr
	// Annotations are added to the Service's (after Pool's).
	Annotations map[string]string
	// IngressIP, on a LoadBalancer Service, is written to its status as
	// its ingress IP, as a cloud controller would, under the class
	// StaticLoadBalancerClass: no daemon allocates or announces it
	// (Switchyard proxies ingress IPs of every class), so the suite
	// decides the path to it (Topology.RouteThrough).
	IngressIP netip.Addr
	// IPv6 makes it a single-stack IPv6 Service (its ClusterIP, its
	// LoadBalancer IP from the pool's IPv6 range, its EndpointSlice of
	// the pods' Addr6); default IPv4, the cluster's first family.
	IPv6 bool
}

// StaticLoadBalancerClass is the loadBalancerClass of the Services whose
// ingress IP the harness writes (ServiceSpec.IngressIP).
const StaticLoadBalancerClass = "cluster-lab.switchyard.dev/static"

// Endpoint is one pod in the Service's EndpointSlice. The zero conditions
// are ready and serving, not terminating.
type Endpoint struct {
	Pod         *Pod
	NotReady    bool
	NotServing  bool
	Terminating bool
}

// Service is a created Service with what the API server allocated.
type Service struct {
	Namespace string
	Name      string
	ClusterIP netip.Addr
	// Ports are the Service ports by name (PortHTTP, PortTCP, PortUDP);
	// NodePorts the allocated node ports by the same names (NodePort and
	// LoadBalancer Services).
	Ports     map[string]uint16
	NodePorts map[string]uint16
	// ExternalIPs and IngressIP are the spec's.
	ExternalIPs []netip.Addr
	IngressIP   netip.Addr
	// LoadBalancerIP is set by WaitLoadBalancerIP.
	LoadBalancerIP netip.Addr
	// IPv6 is the spec's: the Service and its endpoints are IPv6.
	IPv6 bool
}

// AddrOn is addr (an external or ingress IP) with the port named name.
func (s *Service) AddrOn(addr netip.Addr, name string) netip.AddrPort {
	return netip.AddrPortFrom(addr, s.Ports[name])
}

// ClusterAddr is the ClusterIP with the port named name.
func (s *Service) ClusterAddr(name string) netip.AddrPort {
	return netip.AddrPortFrom(s.ClusterIP, s.Ports[name])
}

// NodeAddr is node n's address with the node port named name.
func (s *Service) NodeAddr(n *Node, name string) netip.AddrPort {
	return netip.AddrPortFrom(n.Addr, s.NodePorts[name])
}

// CreateService writes spec's Service in namespace ns, then its
// EndpointSlice (there is no controller manager: the harness is the
// EndpointSlice controller), and returns what the API server allocated.
func (c *Cluster) CreateService(ctx context.Context, ns string, spec ServiceSpec) (*Service, error) {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: spec.Name},
		Spec:       corev1.ServiceSpec{Type: spec.Type},
	}
	if svc.Spec.Type == "" {
		svc.Spec.Type = corev1.ServiceTypeClusterIP
	}
	if spec.IPv6 {
		single := corev1.IPFamilyPolicySingleStack
		svc.Spec.IPFamilyPolicy, svc.Spec.IPFamilies = &single, []corev1.IPFamily{corev1.IPv6Protocol}
	}
	if spec.Pool != "" {
		svc.Annotations = map[string]string{lbipam.AnnotationAddressPool: spec.Pool}
	}
	for k, v := range spec.Annotations {
		if svc.Annotations == nil {
			svc.Annotations = map[string]string{}
		}
		svc.Annotations[k] = v
	}
	if svc.Spec.Type != corev1.ServiceTypeClusterIP {
		svc.Spec.ExternalTrafficPolicy = spec.ETP
		if spec.ETP == "" {
			svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
		}
	}
	for _, a := range spec.ExternalIPs {
		svc.Spec.ExternalIPs = append(svc.Spec.ExternalIPs, a.String())
	}
	if spec.IngressIP.IsValid() {
		if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
			return nil, fmt.Errorf("cluster: Service %s/%s: an ingress IP needs type LoadBalancer", ns, spec.Name)
		}
		class := StaticLoadBalancerClass
		svc.Spec.LoadBalancerClass = &class
	}
	for _, p := range servicePorts {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{
			Name: p.name, Protocol: p.proto, Port: p.port, TargetPort: intstr.FromInt32(p.target),
		})
	}
	created, err := c.Kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("cluster: create Service %s/%s: %w", ns, spec.Name, err)
	}
	if spec.IngressIP.IsValid() {
		created.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: spec.IngressIP.String()}}
		if created, err = c.Kube.CoreV1().Services(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			return nil, fmt.Errorf("cluster: write Service %s/%s's ingress IP: %w", ns, spec.Name, err)
		}
	}
	out := &Service{Namespace: ns, Name: spec.Name, Ports: map[string]uint16{}, NodePorts: map[string]uint16{},
		ExternalIPs: spec.ExternalIPs, IngressIP: spec.IngressIP, IPv6: spec.IPv6}
	if out.ClusterIP, err = netip.ParseAddr(created.Spec.ClusterIP); err != nil {
		return nil, fmt.Errorf("cluster: Service %s/%s ClusterIP %q: %w", ns, spec.Name, created.Spec.ClusterIP, err)
	}
	for _, p := range created.Spec.Ports {
		out.Ports[p.Name] = uint16(p.Port)
		if p.NodePort != 0 {
			out.NodePorts[p.Name] = uint16(p.NodePort)
		}
	}
	if err := c.WriteEndpoints(ctx, out, spec.Endpoints); err != nil {
		return nil, err
	}
	return out, nil
}

// DeleteService deletes the Service and its EndpointSlice.
func (c *Cluster) DeleteService(ctx context.Context, svc *Service) error {
	err := c.Kube.DiscoveryV1().EndpointSlices(svc.Namespace).Delete(ctx, svc.Name+"-lab", metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("cluster: delete EndpointSlice %s/%s-lab: %w", svc.Namespace, svc.Name, err)
	}
	err = c.Kube.CoreV1().Services(svc.Namespace).Delete(ctx, svc.Name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("cluster: delete Service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	return nil
}

// WriteEndpoints creates or replaces the Service's EndpointSlice with eps.
func (c *Cluster) WriteEndpoints(ctx context.Context, svc *Service, eps []Endpoint) error {
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: svc.Namespace, Name: svc.Name + "-lab",
			Labels: map[string]string{
				discoveryv1.LabelServiceName: svc.Name,
				discoveryv1.LabelManagedBy:   "cluster-lab.switchyard.dev",
			},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	if svc.IPv6 {
		slice.AddressType = discoveryv1.AddressTypeIPv6
	}
	for _, p := range servicePorts {
		name, proto, port := p.name, p.proto, p.target
		slice.Ports = append(slice.Ports, discoveryv1.EndpointPort{Name: &name, Protocol: &proto, Port: &port})
	}
	for _, e := range eps {
		ready, serving, terminating := !e.NotReady, !e.NotServing, e.Terminating
		nodeName, zone := e.Pod.Node.Name, e.Pod.Node.Zone
		addr := e.Pod.Addr
		if svc.IPv6 {
			addr = e.Pod.Addr6
		}
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
			Addresses: []string{addr.String()},
			Conditions: discoveryv1.EndpointConditions{
				Ready: &ready, Serving: &serving, Terminating: &terminating,
			},
			NodeName:  &nodeName,
			Zone:      &zone,
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: svc.Namespace, Name: e.Pod.Name},
		})
	}
	slices := c.Kube.DiscoveryV1().EndpointSlices(svc.Namespace)
	old, err := slices.Get(ctx, slice.Name, metav1.GetOptions{})
	switch {
	case err == nil:
		slice.ResourceVersion = old.ResourceVersion
		_, err = slices.Update(ctx, slice, metav1.UpdateOptions{})
	case apierrors.IsNotFound(err):
		_, err = slices.Create(ctx, slice, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("cluster: write EndpointSlice %s/%s: %w", svc.Namespace, slice.Name, err)
	}
	return nil
}

// NewNamespace creates a fresh Kubernetes namespace for one test's
// objects and returns its name (never deleted: without a controller
// manager it would stay Terminating).
func (c *Cluster) NewNamespace(ctx context.Context) (string, error) {
	ns, err := c.Kube.CoreV1().Namespaces().Create(ctx,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "lab-"}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("cluster: create namespace: %w", err)
	}
	return ns.Name, nil
}
