package k8stest_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/switchyard-lb/switchyard/core/k8s/k8stest"
)

func TestService(t *testing.T) {
	want := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt(8080)}}},
	}
	if diff := cmp.Diff(want, k8stest.Service("ns", "web", "10.96.0.10")); diff != "" {
		t.Errorf("Service (-want +got):\n%s", diff)
	}
}

func TestSlice(t *testing.T) {
	http, tcp, port, no := "http", corev1.ProtocolTCP, int32(8080), false
	want := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: "web-1", Labels: map[string]string{"kubernetes.io/service-name": "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &http, Protocol: &tcp, Port: &port}},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: &no}},
			{Addresses: []string{"10.0.0.2"}, Conditions: discoveryv1.EndpointConditions{Ready: &no}},
		},
	}
	got := k8stest.Slice("ns", "web-1", "web", false, "10.0.0.1", "10.0.0.2")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Slice (-want +got):\n%s", diff)
	}
	if got.Endpoints[0].Conditions.Ready == got.Endpoints[1].Conditions.Ready {
		t.Errorf("two endpoints share one Ready pointer: a change to one would change both")
	}
}
