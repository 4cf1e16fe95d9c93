package lbipam

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/switchyard-lb/switchyard/core/ipam"
	"github.com/switchyard-lb/switchyard/core/k8s"
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plan"
)

// Names the controller reads and writes (see /shared/product.md).
const (
	// DefaultClass is the loadBalancerClass handled when Config.Class is
	// empty: the class the planner announces by default.
	DefaultClass = plan.DefaultLoadBalancerClass

	// The annotations are the ones the watch layer converts (core/k8s),
	// named once there.
	AnnotationLoadBalancerIPs = k8s.AnnotationLoadBalancerIPs
	AnnotationAddressPool     = k8s.AnnotationAddressPool
	AnnotationAllowSharedIP   = k8s.AnnotationAllowSharedIP

	// ConditionAddressAllocated is the Service status condition the
	// controller maintains: True with reason Allocated, or False with
	// reason AllocationFailed and the allocator's message.
	ConditionAddressAllocated = "switchyard.dev/AddressAllocated"
	ReasonAllocated           = "Allocated"
	// ReasonAllocationFailed is also the reason of the Events.
	ReasonAllocationFailed = "AllocationFailed"
)

// Handles reports whether the controller allocates for svc: a
// LoadBalancer Service of class, or without a class unless
// ignoreUnclassed. Services of another class are left entirely alone.
func Handles(svc *corev1.Service, class string, ignoreUnclassed bool) bool {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return false
	}
	if c := svc.Spec.LoadBalancerClass; c != nil && *c != "" {
		return *c == class
	}
	return !ignoreUnclassed
}

// RequestFor translates svc, living in a namespace labelled nsLabels, into
// an allocation request. It fails, wrapping ipam.ErrInvalidRequest, when a
// requested address does not parse: a Service asking for an address it
// cannot be given gets none rather than another one.
func RequestFor(svc *corev1.Service, nsLabels map[string]string) (ipam.Request, error) {
	key := model.ServiceKey{Namespace: svc.Namespace, Name: svc.Name}
	m := &model.Service{
		Key:             key,
		AddressPool:     strings.TrimSpace(svc.Annotations[AnnotationAddressPool]),
		SharingKey:      strings.TrimSpace(svc.Annotations[AnnotationAllowSharedIP]),
		LoadBalancerIPs: Published(svc),
	}
	var bad []string
	requested := func(s string) {
		if s = strings.TrimSpace(s); s == "" {
			return
		}
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" || a.Is4In6() {
			bad = append(bad, fmt.Sprintf("%q", s))
			return
		}
		if !slices.Contains(m.RequestedIPs, a) {
			m.RequestedIPs = append(m.RequestedIPs, a)
		}
	}
	requested(svc.Spec.LoadBalancerIP)
	if v, ok := svc.Annotations[AnnotationLoadBalancerIPs]; ok {
		for s := range strings.SplitSeq(v, ",") {
			requested(s)
		}
	}
	for _, p := range svc.Spec.Ports {
		proto, err := model.ParseProtocol(string(p.Protocol))
		if err != nil || p.Port < 1 || p.Port > 65535 {
			continue // the API server validates both; never met in practice
		}
		m.Ports = append(m.Ports, model.ServicePort{Name: p.Name, Protocol: proto, Port: uint16(p.Port)})
	}
	r := ipam.RequestFor(m)
	if len(bad) > 0 {
		return r, fmt.Errorf("%w: requested address %s (spec.loadBalancerIP or annotation %s) is not an IP address",
			ipam.ErrInvalidRequest, strings.Join(bad, ", "), AnnotationLoadBalancerIPs)
	}
	r.Labels = maps.Clone(svc.Labels)
	r.NamespaceLabels = maps.Clone(nsLabels)
	for _, f := range svc.Spec.IPFamilies {
		switch f {
		case corev1.IPv4Protocol:
			r.Families = append(r.Families, ipam.IPv4)
		case corev1.IPv6Protocol:
			r.Families = append(r.Families, ipam.IPv6)
		}
	}
	policy := corev1.IPFamilyPolicySingleStack
	if p := svc.Spec.IPFamilyPolicy; p != nil {
		policy = *p
	}
	switch policy {
	case corev1.IPFamilyPolicySingleStack:
		if len(r.Families) > 1 {
			r.Families = r.Families[:1]
		}
	case corev1.IPFamilyPolicyPreferDualStack:
		r.PreferDualStack = true
	}
	if svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
		// Services sharing an address must have the same local
		// endpoints, or layer-2 election could not pick one node.
		r.BackendKey = "local:" + labels.SelectorFromSet(svc.Spec.Selector).String()
	}
	return r, nil
}

// Published returns the IP addresses of svc's status.loadBalancer.ingress
// in their order; hostnames and unparsable entries are skipped.
func Published(svc *corev1.Service) []netip.Addr {
	var out []netip.Addr
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if a, err := netip.ParseAddr(ing.IP); err == nil && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// DesiredStatus returns the status svc should have once it holds ips,
// allocErr being the allocation failure, if any. The ingress list is kept
// as it is when it already lists ips in order (whatever defaults the API
// server added); the condition's transition time is now when its status
// changes. Compare the result with svc.Status (StatusDiffers) before
// writing.
func DesiredStatus(svc *corev1.Service, ips []netip.Addr, allocErr error, now metav1.Time) corev1.ServiceStatus {
	st := *svc.Status.DeepCopy()
	if !slices.Equal(Published(svc), ips) || len(st.LoadBalancer.Ingress) != len(ips) {
		st.LoadBalancer.Ingress = nil
		vip := corev1.LoadBalancerIPModeVIP
		for _, ip := range ips {
			st.LoadBalancer.Ingress = append(st.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip.String(), IPMode: &vip})
		}
	}
	cond := metav1.Condition{
		Type:               ConditionAddressAllocated,
		Status:             metav1.ConditionTrue,
		ObservedGeneration: svc.Generation,
		LastTransitionTime: now,
		Reason:             ReasonAllocated,
		Message:            "addresses " + joinAddrs(ips),
	}
	if allocErr != nil {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, ReasonAllocationFailed, allocErr.Error()
	}
	meta.SetStatusCondition(&st.Conditions, cond)
	return st
}

// ReleasedStatus returns svc's status without addresses and without the
// controller's condition.
func ReleasedStatus(svc *corev1.Service) corev1.ServiceStatus {
	st := *svc.Status.DeepCopy()
	st.LoadBalancer.Ingress = nil
	meta.RemoveStatusCondition(&st.Conditions, ConditionAddressAllocated)
	if len(st.Conditions) == 0 {
		st.Conditions = nil
	}
	return st
}

// StatusDiffers reports whether writing st would change svc's status.
func StatusDiffers(svc *corev1.Service, st corev1.ServiceStatus) bool {
	old := svc.Status
	if len(old.LoadBalancer.Ingress) == 0 && len(st.LoadBalancer.Ingress) == 0 {
		st.LoadBalancer.Ingress = old.LoadBalancer.Ingress
	}
	if len(old.Conditions) == 0 && len(st.Conditions) == 0 {
		st.Conditions = old.Conditions
	}
	return !equality.Semantic.DeepEqual(old, st)
}

func joinAddrs(ips []netip.Addr) string {
	s := make([]string, len(ips))
	for i, ip := range ips {
		s[i] = ip.String()
	}
	return strings.Join(s, ", ")
}
