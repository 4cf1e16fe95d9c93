package kpbench

import (
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Workload constants: every Service listens on ServicePort/TCP and sends
// to TargetPort on its endpoints.
const (
	ServicePort = 80
	TargetPort  = 8080
	// Namespace holds the benchmark's objects.
	Namespace = "kpbench"
	// NodeName is the node both proxies run as.
	NodeName = "node-a"
	// ClusterCIDR covers every endpoint address: the initial ones in
	// 10.64.0.0/12, the changed ones in 10.80.0.0/12.
	ClusterCIDR = "10.64.0.0/11"
	// MaxServices fits the ClusterIPs in the API server's 10.96.0.0/16
	// service range after the first 256 addresses.
	MaxServices = 60000
)

// Workload is N Services with the same number of endpoints each. Its
// endpoints are the current state: ApplyChange moves it on.
type Workload struct {
	Services []Service
}

// Service is one ClusterIP Service and its endpoints' addresses.
type Service struct {
	Name      string
	VIP       netip.Addr
	Endpoints []netip.Addr
}

// NewWorkload returns n Services with perService endpoints each; the
// same arguments always give the same addresses.
func NewWorkload(n, perService int) (Workload, error) {
	if n <= 0 || n > MaxServices || perService <= 0 || n*perService >= 1<<20 {
		return Workload{}, fmt.Errorf("workload of %d Services x %d endpoints: want 1..%d Services and fewer than %d endpoints", n, perService, MaxServices, 1<<20)
	}
	w := Workload{Services: make([]Service, n)}
	for i := range n {
		s := Service{Name: fmt.Sprintf("svc-%05d", i), VIP: offset(netip.AddrFrom4([4]byte{10, 96, 1, 0}), uint32(i))}
		for j := range perService {
			// 10.64.0.0/12: the initial endpoints.
			s.Endpoints = append(s.Endpoints, offset(netip.AddrFrom4([4]byte{10, 64, 0, 1}), uint32(i*perService+j)))
		}
		w.Services[i] = s
	}
	return w, nil
}

func offset(base netip.Addr, n uint32) netip.Addr {
	b := base.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += n
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// Change is one endpoint change: endpoint 0 of a Service gets a new
// address, as when a pod is replaced.
type Change struct {
	Service int
	Old     netip.Addr
	New     netip.Addr
}

// NextChange returns change number round (0, 1, ...): a Service spread
// over the workload, its first endpoint replaced by an address of
// 10.80.0.0/12 that no earlier round used.
func (w Workload) NextChange(round int) Change {
	i := (round*7919 + 42) % len(w.Services)
	return Change{
		Service: i,
		Old:     w.Services[i].Endpoints[0],
		New:     offset(netip.AddrFrom4([4]byte{10, 80, 0, 1}), uint32(round)),
	}
}

// ApplyChange records c in the workload's current state.
func (w Workload) ApplyChange(c Change) {
	w.Services[c.Service].Endpoints[0] = c.New
}

// Objects returns the workload's Services and EndpointSlices as the API
// server stores them (no controller manager runs: the slices are written
// directly, labelled for their Service).
func (w Workload) Objects() ([]*corev1.Service, []*discoveryv1.EndpointSlice) {
	svcs := make([]*corev1.Service, 0, len(w.Services))
	slices := make([]*discoveryv1.EndpointSlice, 0, len(w.Services))
	ready := true
	for _, s := range w.Services {
		svcs = append(svcs, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: Namespace},
			Spec: corev1.ServiceSpec{
				Type:      corev1.ServiceTypeClusterIP,
				ClusterIP: s.VIP.String(),
				Ports: []corev1.ServicePort{{
					Name: "http", Port: ServicePort, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(TargetPort),
				}},
			},
		})
		eps := make([]discoveryv1.Endpoint, 0, len(s.Endpoints))
		for _, a := range s.Endpoints {
			eps = append(eps, discoveryv1.Endpoint{
				Addresses:  []string{a.String()},
				Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			})
		}
		name, port, proto := "http", int32(TargetPort), corev1.ProtocolTCP
		slices = append(slices, &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Name: SliceName(s.Name), Namespace: Namespace,
				Labels: map[string]string{discoveryv1.LabelServiceName: s.Name, discoveryv1.LabelManagedBy: "kpbench"},
			},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   eps,
			Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
		})
	}
	return svcs, slices
}

// SliceName is the name of a Service's one EndpointSlice.
func SliceName(service string) string { return service + "-0" }

// ChangePatch is the JSON patch making change c on its Service's
// EndpointSlice, stamped with the trigger time the proxies' network
// programming latency metrics start from, to the nanosecond as the
// endpoint controllers write it (whole seconds would make a sub-second
// latency unreadable).
func ChangePatch(c Change, trigger time.Time) []byte {
	return fmt.Appendf(nil, `[{"op":"test","path":"/endpoints/0/addresses/0","value":%q},`+
		`{"op":"replace","path":"/endpoints/0/addresses/0","value":%q},`+
		`{"op":"add","path":"/metadata/annotations","value":{%q:%q}}]`,
		c.Old.String(), c.New.String(), corev1.EndpointsLastChangeTriggerTime, trigger.UTC().Format(time.RFC3339Nano))
}
