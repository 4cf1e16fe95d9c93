package k8stest

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Ptr returns a pointer to a copy of v, for the API's optional fields.
func Ptr[T any](v T) *T { return &v }

// Service returns the ClusterIP Service ns/name at clusterIP with one TCP
// port "http" 80, targeting 8080.
func Service(ns, name, clusterIP string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			Type:       corev1.ServiceTypeClusterIP,
			ClusterIP:  clusterIP,
			ClusterIPs: []string{clusterIP},
			Ports: []corev1.ServicePort{{
				Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080),
			}},
		},
	}
}

// Slice returns the IPv4 EndpointSlice ns/name of Service service with
// port "http" TCP 8080 and one endpoint per address, each ready or not.
func Slice(ns, name, service string, ready bool, addrs ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Labels: map[string]string{discoveryv1.LabelServiceName: service}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: Ptr("http"), Protocol: Ptr(corev1.ProtocolTCP), Port: Ptr(int32(8080))}},
	}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a},
			Conditions: discoveryv1.EndpointConditions{Ready: Ptr(ready)}})
	}
	return s
}
