package lbipam

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchyard-lb/switchyard/core/ipam"
	"github.com/switchyard-lb/switchyard/core/model"
)

func ptr[T any](v T) *T { return &v }

func lbService(mod ...func(*corev1.Service)) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Generation: 3},
		Spec: corev1.ServiceSpec{
			Type:       corev1.ServiceTypeLoadBalancer,
			Ports:      []corev1.ServicePort{{Port: 443, Protocol: corev1.ProtocolTCP}, {Port: 53, Protocol: corev1.ProtocolUDP}},
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
		},
	}
	for _, m := range mod {
		m(svc)
	}
	return svc
}

func TestHandles(t *testing.T) {
	tests := []struct {
		name            string
		svc             *corev1.Service
		ignoreUnclassed bool
		want            bool
	}{
		{"unclassed", lbService(), false, true},
		{"unclassed ignored", lbService(), true, false},
		{"empty class is unclassed", lbService(func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptr("") }), false, true},
		{"our class", lbService(func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptr(DefaultClass) }), true, true},
		{"foreign class", lbService(func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptr("metallb.io/metallb") }), false, false},
		{"not LoadBalancer", lbService(func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort }), false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Handles(tt.svc, DefaultClass, tt.ignoreUnclassed); got != tt.want {
				t.Errorf("Handles = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRequestFor(t *testing.T) {
	key := model.ServiceKey{Namespace: "shop", Name: "web"}
	ports := []ipam.Port{{Port: 443, Protocol: model.TCP}, {Port: 53, Protocol: model.UDP}}
	tests := []struct {
		name    string
		svc     *corev1.Service
		want    ipam.Request
		wantErr error
	}{
		{
			name: "plain",
			svc:  lbService(),
			want: ipam.Request{Key: key, Ports: ports, Families: []ipam.Family{ipam.IPv4}},
		},
		{
			name: "annotations, labels and published status",
			svc: lbService(func(s *corev1.Service) {
				s.Labels = map[string]string{"app": "web"}
				s.Annotations = map[string]string{
					AnnotationAddressPool:   " public ",
					AnnotationAllowSharedIP: "edge",
				}
				s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.7"}, {Hostname: "lb.example"}, {IP: "192.0.2.7"}}
			}),
			want: ipam.Request{
				Key: key, Ports: ports, Families: []ipam.Family{ipam.IPv4},
				Labels: map[string]string{"app": "web"}, NamespaceLabels: map[string]string{"team": "a"},
				Pool: "public", SharingKey: "edge",
				Current: []netip.Addr{netip.MustParseAddr("192.0.2.7")},
			},
		},
		{
			name: "requested by spec and annotation, deduplicated",
			svc: lbService(func(s *corev1.Service) {
				s.Spec.LoadBalancerIP = "192.0.2.10"
				s.Annotations = map[string]string{AnnotationLoadBalancerIPs: "192.0.2.10, 2001:db8::10,"}
				s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
				s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicyRequireDualStack)
			}),
			want: ipam.Request{
				Key: key, Ports: ports, Families: []ipam.Family{ipam.IPv4, ipam.IPv6},
				RequestedIPs: []netip.Addr{netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::10")},
			},
		},
		{
			name: "prefer dual-stack, IPv6 primary",
			svc: lbService(func(s *corev1.Service) {
				s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}
				s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicyPreferDualStack)
			}),
			want: ipam.Request{Key: key, Ports: ports, Families: []ipam.Family{ipam.IPv6, ipam.IPv4}, PreferDualStack: true},
		},
		{
			name: "single-stack keeps the primary family",
			svc: lbService(func(s *corev1.Service) {
				s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}
				s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicySingleStack)
			}),
			want: ipam.Request{Key: key, Ports: ports, Families: []ipam.Family{ipam.IPv6}},
		},
		{
			name: "externalTrafficPolicy Local sets the backend key",
			svc: lbService(func(s *corev1.Service) {
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				s.Spec.Selector = map[string]string{"tier": "edge", "app": "web"}
			}),
			want: ipam.Request{Key: key, Ports: ports, Families: []ipam.Family{ipam.IPv4}, BackendKey: "local:app=web,tier=edge"},
		},
		{
			name: "unparsable requested address",
			svc: lbService(func(s *corev1.Service) {
				s.Annotations = map[string]string{AnnotationLoadBalancerIPs: "192.0.2.300"}
			}),
			wantErr: ipam.ErrInvalidRequest,
		},
		{
			name: "zoned requested address",
			svc: lbService(func(s *corev1.Service) {
				s.Spec.LoadBalancerIP = "fe80::1%eth0"
			}),
			wantErr: ipam.ErrInvalidRequest,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := map[string]string(nil)
			if tt.want.NamespaceLabels != nil {
				ns = tt.want.NamespaceLabels
			}
			got, err := RequestFor(tt.svc, ns)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("RequestFor error = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
				t.Errorf("RequestFor (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStatus(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Minute))
	vip := corev1.LoadBalancerIPModeVIP
	ip4, ip6 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")
	allocated := func(at metav1.Time, msg string) metav1.Condition {
		return metav1.Condition{Type: ConditionAddressAllocated, Status: metav1.ConditionTrue, ObservedGeneration: 3,
			LastTransitionTime: at, Reason: ReasonAllocated, Message: msg}
	}
	foreign := metav1.Condition{Type: "example.com/Other", Status: metav1.ConditionTrue, LastTransitionTime: t0, Reason: "X"}
	failure := errors.New("allocate addresses for shop/web: pool exhausted")

	tests := []struct {
		name        string
		status      corev1.ServiceStatus
		ips         []netip.Addr
		err         error
		released    bool
		want        corev1.ServiceStatus
		wantDiffers bool
	}{
		{
			name: "first allocation",
			ips:  []netip.Addr{ip4, ip6},
			want: corev1.ServiceStatus{
				LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "192.0.2.1", IPMode: &vip}, {IP: "2001:db8::1", IPMode: &vip}}},
				Conditions:   []metav1.Condition{allocated(t1, "addresses 192.0.2.1, 2001:db8::1")},
			},
			wantDiffers: true,
		},
		{
			name: "unchanged, API server left ipMode unset",
			status: corev1.ServiceStatus{
				LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "192.0.2.1"}}},
				Conditions:   []metav1.Condition{foreign, allocated(t0, "addresses 192.0.2.1")},
			},
			ips: []netip.Addr{ip4},
			want: corev1.ServiceStatus{
				LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "192.0.2.1"}}},
				Conditions:   []metav1.Condition{foreign, allocated(t0, "addresses 192.0.2.1")},
			},
		},
		{
			name: "failure keeps other conditions and moves the transition time",
			status: corev1.ServiceStatus{
				Conditions: []metav1.Condition{foreign, allocated(t0, "addresses 192.0.2.1")},
			},
			err: failure,
			want: corev1.ServiceStatus{
				Conditions: []metav1.Condition{foreign, {Type: ConditionAddressAllocated, Status: metav1.ConditionFalse, ObservedGeneration: 3,
					LastTransitionTime: t1, Reason: ReasonAllocationFailed, Message: failure.Error()}},
			},
			wantDiffers: true,
		},
		{
			name: "released",
			status: corev1.ServiceStatus{
				LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "192.0.2.1"}}},
				Conditions:   []metav1.Condition{allocated(t0, "addresses 192.0.2.1"), foreign},
			},
			released:    true,
			want:        corev1.ServiceStatus{Conditions: []metav1.Condition{foreign}},
			wantDiffers: true,
		},
		{
			name:     "released, nothing to clear",
			status:   corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{}}},
			released: true,
			want:     corev1.ServiceStatus{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := lbService(func(s *corev1.Service) { s.Status = tt.status })
			var got corev1.ServiceStatus
			if tt.released {
				got = ReleasedStatus(svc)
			} else {
				got = DesiredStatus(svc, tt.ips, tt.err, t1)
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
			if d := StatusDiffers(svc, got); d != tt.wantDiffers {
				t.Errorf("StatusDiffers = %v, want %v", d, tt.wantDiffers)
			}
		})
	}
}
