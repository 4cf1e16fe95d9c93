package k8s

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchyard-lb/switchyard/core/model"
)

func ptr[T any](v T) *T { return &v }

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

func meta(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: "ns", Name: name} }

func TestConvertService(t *testing.T) {
	key := model.ServiceKey{Namespace: "ns", Name: "web"}
	tests := []struct {
		name         string
		in           corev1.Service
		want         *model.Service
		wantProblems int
	}{{
		name: "ClusterIP defaults",
		in: corev1.Service{ObjectMeta: meta("web"), Spec: corev1.ServiceSpec{
			ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80}},
		}},
		want: &model.Service{Key: key, Type: model.ClusterIP, ClusterIPs: addrs("10.96.0.10"),
			Ports: []model.ServicePort{{Name: "http", Protocol: model.TCP, Port: 80}}},
	}, {
		name: "headless, clusterIP only",
		in:   corev1.Service{ObjectMeta: meta("web"), Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "None"}},
		want: &model.Service{Key: key, Type: model.ClusterIP},
	}, {
		name: "dual-stack NodePort sorted, ports sorted, protocols",
		in: corev1.Service{ObjectMeta: meta("web"), Spec: corev1.ServiceSpec{
			Type:       corev1.ServiceTypeNodePort,
			ClusterIPs: []string{"fd00::10", "10.96.0.10"},
			Ports: []corev1.ServicePort{
				{Name: "dns-udp", Protocol: corev1.ProtocolUDP, Port: 53, NodePort: 30053},
				{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: 53, NodePort: 30053},
				{Name: "sctp", Protocol: corev1.ProtocolSCTP, Port: 9, NodePort: 30009},
			},
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			InternalTrafficPolicy: ptr(corev1.ServiceInternalTrafficPolicyLocal),
		}},
		want: &model.Service{Key: key, Type: model.NodePort, ClusterIPs: addrs("10.96.0.10", "fd00::10"),
			Ports: []model.ServicePort{
				{Name: "sctp", Protocol: model.SCTP, Port: 9, NodePort: 30009},
				{Name: "dns-tcp", Protocol: model.TCP, Port: 53, NodePort: 30053},
				{Name: "dns-udp", Protocol: model.UDP, Port: 53, NodePort: 30053},
			},
			ExternalTrafficPolicy: model.PolicyLocal, InternalTrafficPolicy: model.PolicyLocal},
	}, {
		name: "LoadBalancer with everything",
		in: corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", Annotations: map[string]string{
				AnnotationPolicy:          "builtin:maglev",
				AnnotationPolicyParams:    `{"m":65537}`,
				AnnotationScheduler:       "mh",
				AnnotationLoadBalancerIPs: " 192.0.2.10, 2001:db8::10 ,,",
				AnnotationAddressPool:     "public",
				AnnotationAllowSharedIP:   "team-a",
				AnnotationForwardingMode:  "dsr",
			}},
			Spec: corev1.ServiceSpec{
				Type:                     corev1.ServiceTypeLoadBalancer,
				ClusterIPs:               []string{"10.96.0.10"},
				ExternalIPs:              []string{"198.51.100.2", "198.51.100.1", "198.51.100.2"},
				LoadBalancerIP:           "192.0.2.9",
				LoadBalancerSourceRanges: []string{"10.0.0.0/8", " 192.168.1.7/24 "},
				LoadBalancerClass:        ptr("switchyard.dev/lb"),
				Ports:                    []corev1.ServicePort{{Port: 443, NodePort: 31443}},
				ExternalTrafficPolicy:    corev1.ServiceExternalTrafficPolicyLocal,
				HealthCheckNodePort:      32000,
				SessionAffinity:          corev1.ServiceAffinityClientIP,
				SessionAffinityConfig: &corev1.SessionAffinityConfig{
					ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr[int32](60)}},
				TrafficDistribution: ptr("PreferClose"),
			},
			Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{
				{IP: "192.0.2.10"},
				{Hostname: "lb.example"},
				{IP: "192.0.2.11", IPMode: ptr(corev1.LoadBalancerIPModeVIP)},
				{IP: "192.0.2.12", IPMode: ptr(corev1.LoadBalancerIPModeProxy)},
			}}},
		},
		want: &model.Service{
			Key: key, Type: model.LoadBalancer,
			ClusterIPs:               addrs("10.96.0.10"),
			ExternalIPs:              addrs("198.51.100.1", "198.51.100.2"),
			LoadBalancerIPs:          addrs("192.0.2.10", "192.0.2.11"),
			LoadBalancerSourceRanges: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.1.0/24")},
			LoadBalancerClass:        "switchyard.dev/lb",
			RequestedIPs:             addrs("192.0.2.9", "192.0.2.10", "2001:db8::10"),
			Ports:                    []model.ServicePort{{Protocol: model.TCP, Port: 443, NodePort: 31443}},
			ExternalTrafficPolicy:    model.PolicyLocal,
			HealthCheckNodePort:      32000,
			AffinityTimeout:          time.Minute,
			TrafficDistribution:      "PreferClose",
			Policy:                   "builtin:maglev",
			PolicyParams:             `{"m":65537}`,
			Scheduler:                "mh",
			AddressPool:              "public",
			SharingKey:               "team-a",
			ForwardingMode:           model.ForwardingDSR,
		},
	}, {
		name: "ClientIP affinity without config takes the default",
		in: corev1.Service{ObjectMeta: meta("web"), Spec: corev1.ServiceSpec{
			ClusterIP: "10.96.0.10", SessionAffinity: corev1.ServiceAffinityClientIP}},
		want: &model.Service{Key: key, Type: model.ClusterIP, ClusterIPs: addrs("10.96.0.10"),
			AffinityTimeout: 10800 * time.Second},
	}, {
		name: "ExternalName",
		in: corev1.Service{ObjectMeta: meta("web"), Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeExternalName, ExternalName: "db.example"}},
		want: &model.Service{Key: key, Type: model.ExternalName},
	}, {
		name: "malformed fields are skipped one by one",
		in: corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", Annotations: map[string]string{
				AnnotationLoadBalancerIPs: "192.0.2.10,not-an-ip", AnnotationForwardingMode: "DSR"}},
			Spec: corev1.ServiceSpec{
				Type:                     "Weird",
				ClusterIPs:               []string{"10.96.0.10", "10.96.0.300", "fe80::1%eth0"},
				ExternalIPs:              []string{"::ffff:1.2.3.4", "198.51.100.1"},
				LoadBalancerIP:           "bogus",
				LoadBalancerSourceRanges: []string{"10.0.0.0/33"},
				Ports: []corev1.ServicePort{
					{Name: "a", Port: 70000},
					{Name: "b", Protocol: "ICMP", Port: 1},
					{Name: "c", Port: 80, NodePort: -1},
				},
				HealthCheckNodePort: 99999,
				SessionAffinity:     corev1.ServiceAffinityClientIP,
				SessionAffinityConfig: &corev1.SessionAffinityConfig{
					ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr[int32](0)}},
			},
			Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "x"}}}},
		},
		want: &model.Service{Key: key, ClusterIPs: addrs("10.96.0.10"), ExternalIPs: addrs("198.51.100.1"),
			RequestedIPs: addrs("192.0.2.10"), Ports: []model.ServicePort{{Name: "c", Protocol: model.TCP, Port: 80}},
			AffinityTimeout: 10800 * time.Second},
		wantProblems: 14,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, problems := convertService(&tt.in)
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
				cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
				t.Errorf("convertService (-want +got):\n%s", diff)
			}
			if len(problems) != tt.wantProblems {
				t.Errorf("convertService problems = %d, want %d: %v", len(problems), tt.wantProblems, problems)
			}
		})
	}
}

func TestConvertSlice(t *testing.T) {
	tests := []struct {
		name         string
		in           discoveryv1.EndpointSlice
		want         []model.Endpoint
		wantProblems int
	}{{
		name: "conditions defaulted, one endpoint per port, sorted",
		in: discoveryv1.EndpointSlice{
			ObjectMeta:  meta("web-1"),
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports: []discoveryv1.EndpointPort{
				{Name: ptr("http"), Port: ptr[int32](8080)},
				{Name: ptr("dns"), Port: ptr[int32](53), Protocol: ptr(corev1.ProtocolUDP)},
			},
			Endpoints: []discoveryv1.Endpoint{
				{Addresses: []string{"10.0.0.2", "10.0.0.99"}, NodeName: ptr("n2"), Zone: ptr("z2")},
				{Addresses: []string{"10.0.0.1"}, Conditions: discoveryv1.EndpointConditions{
					Ready: ptr(false), Terminating: ptr(true)},
					Hints: &discoveryv1.EndpointHints{
						ForZones: []discoveryv1.ForZone{{Name: "z1"}, {Name: "z0"}},
						ForNodes: []discoveryv1.ForNode{{Name: "n1"}}}},
				{Addresses: []string{"10.0.0.3"}, Conditions: discoveryv1.EndpointConditions{
					Ready: ptr(false), Serving: ptr(true), Terminating: ptr(true)}},
			},
		},
		want: []model.Endpoint{
			{Addr: netip.MustParseAddr("10.0.0.1"), Port: 53, PortName: "dns", Protocol: model.UDP,
				Terminating: true, HintZones: []string{"z0", "z1"}, HintNodes: []string{"n1"}},
			{Addr: netip.MustParseAddr("10.0.0.1"), Port: 8080, PortName: "http", Protocol: model.TCP,
				Terminating: true, HintZones: []string{"z0", "z1"}, HintNodes: []string{"n1"}},
			{Addr: netip.MustParseAddr("10.0.0.2"), Port: 53, PortName: "dns", Protocol: model.UDP,
				NodeName: "n2", Zone: "z2", Ready: true, Serving: true},
			{Addr: netip.MustParseAddr("10.0.0.2"), Port: 8080, PortName: "http", Protocol: model.TCP,
				NodeName: "n2", Zone: "z2", Ready: true, Serving: true},
			{Addr: netip.MustParseAddr("10.0.0.3"), Port: 53, PortName: "dns", Protocol: model.UDP,
				Serving: true, Terminating: true},
			{Addr: netip.MustParseAddr("10.0.0.3"), Port: 8080, PortName: "http", Protocol: model.TCP,
				Serving: true, Terminating: true},
		},
	}, {
		name: "IPv6",
		in: discoveryv1.EndpointSlice{
			ObjectMeta: meta("web-1"), AddressType: discoveryv1.AddressTypeIPv6,
			Ports:     []discoveryv1.EndpointPort{{Port: ptr[int32](80)}},
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"fd00::1"}}},
		},
		want: []model.Endpoint{{Addr: netip.MustParseAddr("fd00::1"), Port: 80, Protocol: model.TCP, Ready: true, Serving: true}},
	}, {
		name: "FQDN slice carries nothing",
		in: discoveryv1.EndpointSlice{
			ObjectMeta: meta("web-1"), AddressType: discoveryv1.AddressTypeFQDN,
			Ports:     []discoveryv1.EndpointPort{{Port: ptr[int32](80)}},
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"db.example"}}},
		},
	}, {
		name: "no ports, no endpoints",
		in: discoveryv1.EndpointSlice{
			ObjectMeta: meta("web-1"), AddressType: discoveryv1.AddressTypeIPv4,
			Ports:     []discoveryv1.EndpointPort{{Name: ptr("all")}},
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}}},
		},
	}, {
		name: "malformed addresses and ports skipped",
		in: discoveryv1.EndpointSlice{
			ObjectMeta: meta("web-1"), AddressType: discoveryv1.AddressTypeIPv4,
			Ports: []discoveryv1.EndpointPort{
				{Port: ptr[int32](0)},
				{Port: ptr[int32](81), Protocol: ptr(corev1.Protocol("ICMP"))},
				{Port: ptr[int32](80)},
			},
			Endpoints: []discoveryv1.Endpoint{
				{Addresses: []string{"10.0.0.256"}},
				{Addresses: []string{"fd00::1"}},
				{},
				{Addresses: []string{"10.0.0.1"}},
			},
		},
		want:         []model.Endpoint{{Addr: netip.MustParseAddr("10.0.0.1"), Port: 80, Protocol: model.TCP, Ready: true, Serving: true}},
		wantProblems: 4,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, problems := convertSlice(&tt.in)
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("convertSlice (-want +got):\n%s", diff)
			}
			if len(problems) != tt.wantProblems {
				t.Errorf("convertSlice problems = %d, want %d: %v", len(problems), tt.wantProblems, problems)
			}
		})
	}
}

func TestSliceServiceAndTriggerTime(t *testing.T) {
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-abc",
		Labels:      map[string]string{discoveryv1.LabelServiceName: "web"},
		Annotations: map[string]string{corev1.EndpointsLastChangeTriggerTime: "2026-11-29T20:00:00Z"}}}
	key, ok := sliceService(s)
	if diff := cmp.Diff(model.ServiceKey{Namespace: "ns", Name: "web"}, key); diff != "" || !ok {
		t.Errorf("sliceService = %v, %v (-want +got):\n%s", key, ok, diff)
	}
	if got, want := triggerTime(s), time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("triggerTime = %v, want %v", got, want)
	}
	s.Annotations[corev1.EndpointsLastChangeTriggerTime] = "yesterday"
	if got := triggerTime(s); !got.IsZero() {
		t.Errorf("triggerTime of a malformed annotation = %v, want zero", got)
	}
	delete(s.Labels, discoveryv1.LabelServiceName)
	if _, ok := sliceService(s); ok {
		t.Errorf("sliceService of an unlabelled slice reported a Service")
	}
}

func TestConvertNode(t *testing.T) {
	tests := []struct {
		name         string
		in           corev1.Node
		want         *model.Node
		wantProblems int
	}{{
		name: "zone, addresses, ready, labels",
		in: corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{
				corev1.LabelTopologyZone: "z1", "role": "edge"}},
			Status: corev1.NodeStatus{
				Addresses: []corev1.NodeAddress{
					{Type: corev1.NodeHostName, Address: "n1"},
					{Type: corev1.NodeInternalIP, Address: "fd00::5"},
					{Type: corev1.NodeExternalIP, Address: "203.0.113.5"},
					{Type: corev1.NodeInternalIP, Address: "10.1.0.5"},
					{Type: corev1.NodeInternalIP, Address: "10.1.0.500"},
				},
				Conditions: []corev1.NodeCondition{
					{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
					{Type: corev1.NodeReady, Status: corev1.ConditionTrue},
				},
			},
		},
		want: &model.Node{Name: "n1", Zone: "z1", Addresses: addrs("10.1.0.5", "203.0.113.5", "fd00::5"), Ready: true,
			StatusAddresses: []model.NodeAddress{
				{Type: model.NodeHostname, Address: "n1"},
				{Type: model.NodeInternalIP, Address: "fd00::5"},
				{Type: model.NodeExternalIP, Address: "203.0.113.5"},
				{Type: model.NodeInternalIP, Address: "10.1.0.5"},
				{Type: model.NodeInternalIP, Address: "10.1.0.500"},
			},
			Labels: map[string]string{corev1.LabelTopologyZone: "z1", "role": "edge"}},
		wantProblems: 1,
	}, {
		name: "not ready, nothing known",
		in: corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}, Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}}}},
		want: &model.Node{Name: "n2"},
	}, {
		name: "deletion timestamp: being deleted",
		in: corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n3", DeletionTimestamp: &metav1.Time{Time: time.Unix(1, 0)},
			Finalizers: []string{"example.com/hold"}}},
		want: &model.Node{Name: "n3", Deleting: true},
	}, {
		name: "the cluster autoscaler's taint, of any effect: being deleted",
		in: corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n4"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{
			{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule},
			{Key: "ToBeDeletedByClusterAutoscaler", Value: "1733100000", Effect: corev1.TaintEffectPreferNoSchedule},
		}}},
		want: &model.Node{Name: "n4", Deleting: true, Unschedulable: true},
	}, {
		name: "cordoned, or an autoscaler's deletion candidate: not being deleted, unschedulable",
		in: corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n5"}, Spec: corev1.NodeSpec{Unschedulable: true, Taints: []corev1.Taint{
			{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule},
			{Key: "DeletionCandidateOfClusterAutoscaler", Value: "1733100000", Effect: corev1.TaintEffectPreferNoSchedule},
		}}},
		want: &model.Node{Name: "n5", Unschedulable: true},
	}, {
		name: "the kubelet's graceful node shutdown",
		in: corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n6"}, Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse,
				Reason: "KubeletNotReady", Message: "node is shutting down"}}}},
		want: &model.Node{Name: "n6", ShuttingDown: true},
	}, {
		name: "not ready for another reason",
		in: corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n7"}, Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse,
				Reason: "KubeletNotReady", Message: "container runtime network not ready"}}}},
		want: &model.Node{Name: "n7"},
	}, {
		name: "out of service",
		in: corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n8"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{
			{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute},
		}}},
		want: &model.Node{Name: "n8", ShuttingDown: true},
	}, {
		name: "pod CIDRs, one of them bad",
		in: corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n9"}, Spec: corev1.NodeSpec{
			PodCIDR: "10.244.1.0/24", PodCIDRs: []string{"10.244.1.0/24", "fd00:10:244:1::/64", "10.244.300.0/24"}}},
		want:         &model.Node{Name: "n9", PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:10:244:1::/64")}},
		wantProblems: 1,
	}, {
		name: "only the older spec.podCIDR",
		in:   corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n10"}, Spec: corev1.NodeSpec{PodCIDR: "10.244.2.0/24"}},
		want: &model.Node{Name: "n10", PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.2.0/24")}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, problems := convertNode(&tt.in)
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
				cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
				t.Errorf("convertNode (-want +got):\n%s", diff)
			}
			if len(problems) != tt.wantProblems {
				t.Errorf("convertNode problems = %d, want %d: %v", len(problems), tt.wantProblems, problems)
			}
		})
	}
}

// FuzzConvert feeds arbitrary field values to the conversions: they must
// not panic, and what they return must be valid, sorted and deduplicated.
func FuzzConvert(f *testing.F) {
	f.Add("10.96.0.1", "fd00::1", "10.0.0.0/8", int32(80), "TCP", "IPv4", "192.0.2.1, bad", "LoadBalancer")
	f.Add("None", "", " 1.2.3.4/33", int32(0), "SCTP", "IPv6", ",,", "")
	f.Add("::ffff:1.2.3.4", "fe80::1%eth0", "::/0", int32(70000), "ICMP", "FQDN", "2001:db8::1", "Bogus")
	f.Fuzz(func(t *testing.T, ip1, ip2, cidr string, port int32, proto, family, ann, typ string) {
		svc, _ := convertService(&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationLoadBalancerIPs: ann}},
			Spec: corev1.ServiceSpec{
				Type: corev1.ServiceType(typ), ClusterIP: ip1, ClusterIPs: []string{ip1, ip2},
				ExternalIPs: []string{ip2, ip1}, LoadBalancerIP: ip2, LoadBalancerSourceRanges: []string{cidr, cidr},
				Ports: []corev1.ServicePort{{Port: port, NodePort: port, Protocol: corev1.Protocol(proto)}, {Port: port}},
			},
			Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: ip1}}}},
		})
		for _, list := range [][]netip.Addr{svc.ClusterIPs, svc.ExternalIPs, svc.LoadBalancerIPs, svc.RequestedIPs} {
			for i, a := range list {
				if !a.IsValid() || a.Zone() != "" || (i > 0 && list[i-1].Compare(a) >= 0) {
					t.Errorf("address list %v is not valid, sorted and unique", list)
				}
			}
		}
		for i, p := range svc.Ports {
			if p.Port == 0 || (i > 0 && compareServicePort(svc.Ports[i-1], p) >= 0) {
				t.Errorf("ports %v are not valid, sorted and unique", svc.Ports)
			}
		}
		eps, _ := convertSlice(&discoveryv1.EndpointSlice{
			AddressType: discoveryv1.AddressType(family),
			Ports: []discoveryv1.EndpointPort{{Port: &port, Protocol: ptr(corev1.Protocol(proto))},
				{Port: ptr[int32](1), Name: &ann}},
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{ip1}}, {Addresses: []string{ip2}}, {Addresses: []string{ip1}}},
		})
		if !strictlySorted(mergeEndpoints(map[string][]model.Endpoint{"a": eps, "b": eps})) {
			t.Errorf("merged endpoints %v are not sorted and unique", eps)
		}
		for _, e := range eps {
			if !e.Addr.IsValid() || e.Port == 0 {
				t.Errorf("invalid endpoint %+v", e)
			}
		}
	})
}
