//go:build integration

package main

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/switchyard-lb/switchyard/core/k8s/k8stest"
	"github.com/switchyard-lb/switchyard/core/reconcile"
	"github.com/switchyard-lb/switchyard/test/apitest"
)

// TestIntegrationE2EServiceTypes runs the whole daemon against the real API
// server with one Service of each type and traffic policy, and compares the
// applied table of /debug/state with what kube-proxy's rules give.
func TestIntegrationE2EServiceTypes(t *testing.T) {
	srv := apitest.Start(t)
	ns := srv.Namespace(t)
	client := srv.Client
	createNode(t, client, "node-a", "192.168.0.10", "fd00::10")
	createNode(t, client, "node-b", "192.168.0.11", "fd00::11")

	v4, v6 := discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6
	terminating := func(addr, node string, serving bool) e2eEndpoint {
		return e2eEndpoint{addr: addr, node: node, serving: serving, terminating: true}
	}
	multiPorts := []discoveryv1.EndpointPort{
		{Name: k8stest.Ptr("dns"), Protocol: k8stest.Ptr(corev1.ProtocolUDP), Port: k8stest.Ptr(int32(5353))},
		{Name: k8stest.Ptr("sig"), Protocol: k8stest.Ptr(corev1.ProtocolSCTP), Port: k8stest.Ptr(int32(3868))},
	}
	svcs := createAll(t, client, ns, []*corev1.Service{
		e2eService("cluster"),
		e2eService("nodeport", func(s *corev1.ServiceSpec) { s.Type = corev1.ServiceTypeNodePort }),
		e2eService("lb-local", func(s *corev1.ServiceSpec) {
			s.Type = corev1.ServiceTypeLoadBalancer
			s.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}),
		e2eService("lb-foreign", func(s *corev1.ServiceSpec) {
			s.Type = corev1.ServiceTypeLoadBalancer
			s.LoadBalancerClass = k8stest.Ptr("example.com/other")
			s.AllocateLoadBalancerNodePorts = k8stest.Ptr(false)
		}),
		e2eService("external", func(s *corev1.ServiceSpec) { s.ExternalIPs = []string{"198.51.100.7"} }),
		e2eService("itp-local", func(s *corev1.ServiceSpec) {
			s.InternalTrafficPolicy = k8stest.Ptr(corev1.ServiceInternalTrafficPolicyLocal)
		}),
		e2eService("affinity", func(s *corev1.ServiceSpec) {
			s.SessionAffinity = corev1.ServiceAffinityClientIP
			s.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: k8stest.Ptr(int32(600))}}
		}),
		e2eService("terminating-only"),
		e2eService("terminating-and-ready"),
		e2eService("dual", func(s *corev1.ServiceSpec) {
			s.Type = corev1.ServiceTypeNodePort
			s.IPFamilyPolicy = k8stest.Ptr(corev1.IPFamilyPolicyRequireDualStack)
			s.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
		}),
		e2eService("udp-sctp", func(s *corev1.ServiceSpec) {
			s.Ports = []corev1.ServicePort{
				{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(5353)},
				{Name: "sig", Protocol: corev1.ProtocolSCTP, Port: 3868, TargetPort: intstr.FromInt32(3868)},
			}
		}),
		e2eService("no-endpoints"),
	}, []*discoveryv1.EndpointSlice{
		e2eSlice("cluster", "cluster-1", v4, nil, readyAt("10.1.0.1", "node-a"), readyAt("10.1.0.2", "node-b")),
		e2eSlice("nodeport", "nodeport-1", v4, nil, readyAt("10.1.1.1", "node-a"), readyAt("10.1.1.2", "node-b")),
		e2eSlice("lb-local", "lb-local-1", v4, nil, readyAt("10.1.2.1", "node-a"), readyAt("10.1.2.2", "node-b")),
		e2eSlice("lb-foreign", "lb-foreign-1", v4, nil, readyAt("10.1.3.1", "node-b")),
		e2eSlice("external", "external-1", v4, nil, readyAt("10.1.4.1", "node-b")),
		e2eSlice("itp-local", "itp-local-1", v4, nil, readyAt("10.1.5.1", "node-a"), readyAt("10.1.5.2", "node-b")),
		e2eSlice("affinity", "affinity-1", v4, nil, readyAt("10.1.6.1", "node-b")),
		// Serving and terminating endpoints are used only when no ready one
		// exists; not serving ones never.
		e2eSlice("terminating-only", "terminating-only-1", v4, nil,
			terminating("10.1.7.1", "node-b", true), terminating("10.1.7.2", "node-b", false)),
		e2eSlice("terminating-and-ready", "terminating-and-ready-1", v4, nil,
			terminating("10.1.8.1", "node-b", true), readyAt("10.1.8.2", "node-b")),
		e2eSlice("dual", "dual-v4", v4, nil, readyAt("10.1.9.1", "node-b")),
		e2eSlice("dual", "dual-v6", v6, nil, readyAt("fd00:1::9:1", "node-b")),
		e2eSlice("udp-sctp", "udp-sctp-1", v4, multiPorts, readyAt("10.1.10.1", "node-b")),
	})

	// LoadBalancer ingress, as a cloud controller (or our allocator) writes
	// it.
	for name, ip := range map[string]string{"lb-local": "203.0.113.10", "lb-foreign": "203.0.113.20"} {
		s := svcs[name]
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}}
		got, err := client.CoreV1().Services(ns).UpdateStatus(t.Context(), s, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("write %s ingress: %v", name, err)
		}
		svcs[name] = got
	}

	cip := func(name string) string { return svcs[name].Spec.ClusterIP }
	at := func(ip string, port int32) string {
		return netip.AddrPortFrom(netip.MustParseAddr(ip), uint16(port)).String()
	}
	nodePort := func(name string) int32 { return svcs[name].Spec.Ports[0].NodePort }
	local := func(v reconcile.VirtualServiceState) reconcile.VirtualServiceState { v.Local = true; return v }
	dualV6 := svcs["dual"].Spec.ClusterIPs[1]

	want := map[string]reconcile.ServiceState{
		"cluster": {VirtualServices: []reconcile.VirtualServiceState{
			wantVS("TCP", at(cip("cluster"), 80), "ClusterIP", "10.1.0.1:8080", "10.1.0.2:8080"),
		}},
		// NodePort on the node's address of the Service's family only.
		"nodeport": {VirtualServices: []reconcile.VirtualServiceState{
			wantVS("TCP", at(cip("nodeport"), 80), "ClusterIP", "10.1.1.1:8080", "10.1.1.2:8080"),
			wantVS("TCP", at("192.168.0.10", nodePort("nodeport")), "NodePort", "10.1.1.1:8080", "10.1.1.2:8080"),
		}},
		// ETP Local: external frontends use the local endpoint only; the
		// ClusterIP keeps both. Ours (no class), so announced.
		"lb-local": {
			VirtualServices: []reconcile.VirtualServiceState{
				wantVS("TCP", at(cip("lb-local"), 80), "ClusterIP", "10.1.2.1:8080", "10.1.2.2:8080"),
				local(wantVS("TCP", at("192.168.0.10", nodePort("lb-local")), "NodePort", "10.1.2.1:8080")),
				local(wantVS("TCP", "203.0.113.10:80", "LoadBalancer", "10.1.2.1:8080")),
			},
			Announce:            []netip.Addr{netip.MustParseAddr("203.0.113.10")},
			HealthCheckNodePort: uint16(svcs["lb-local"].Spec.HealthCheckNodePort),
			LocalEndpoints:      1,
		},
		// A foreign class: proxied as kube-proxy does, never announced.
		"lb-foreign": {VirtualServices: []reconcile.VirtualServiceState{
			wantVS("TCP", at(cip("lb-foreign"), 80), "ClusterIP", "10.1.3.1:8080"),
			wantVS("TCP", "203.0.113.20:80", "LoadBalancer", "10.1.3.1:8080"),
		}},
		"external": {VirtualServices: []reconcile.VirtualServiceState{
			wantVS("TCP", at(cip("external"), 80), "ClusterIP", "10.1.4.1:8080"),
			wantVS("TCP", "198.51.100.7:80", "ExternalIP", "10.1.4.1:8080"),
		}},
		// ITP Local: the ClusterIP uses node-a's endpoint only.
		"itp-local": {VirtualServices: []reconcile.VirtualServiceState{
			wantVS("TCP", at(cip("itp-local"), 80), "ClusterIP", "10.1.5.1:8080"),
		}},
		"affinity": {VirtualServices: []reconcile.VirtualServiceState{
			func() reconcile.VirtualServiceState {
				v := wantVS("TCP", at(cip("affinity"), 80), "ClusterIP", "10.1.6.1:8080")
				v.AffinitySeconds = 600
				return v
			}(),
		}},
		"terminating-only": {VirtualServices: []reconcile.VirtualServiceState{
			wantVS("TCP", at(cip("terminating-only"), 80), "ClusterIP", "10.1.7.1:8080"),
		}},
		"terminating-and-ready": {VirtualServices: []reconcile.VirtualServiceState{
			wantVS("TCP", at(cip("terminating-and-ready"), 80), "ClusterIP", "10.1.8.2:8080"),
		}},
		// Dual-stack: each family on its own, NodePort on the node's
		// address of each family.
		"dual": {VirtualServices: []reconcile.VirtualServiceState{
			wantVS("TCP", at(cip("dual"), 80), "ClusterIP", "10.1.9.1:8080"),
			wantVS("TCP", at(dualV6, 80), "ClusterIP", "[fd00:1::9:1]:8080"),
			wantVS("TCP", at("192.168.0.10", nodePort("dual")), "NodePort", "10.1.9.1:8080"),
			wantVS("TCP", at("fd00::10", nodePort("dual")), "NodePort", "[fd00:1::9:1]:8080"),
		}},
		"udp-sctp": {VirtualServices: []reconcile.VirtualServiceState{
			func() reconcile.VirtualServiceState {
				v := wantVS("UDP", at(cip("udp-sctp"), 53), "ClusterIP", "10.1.10.1:5353")
				v.PortName = "dns"
				return v
			}(),
			func() reconcile.VirtualServiceState {
				v := wantVS("SCTP", at(cip("udp-sctp"), 3868), "ClusterIP", "10.1.10.1:3868")
				v.PortName = "sig"
				return v
			}(),
		}},
		// No endpoints: a frontend with no destinations, so the dataplane
		// rejects its traffic instead of black-holing it.
		"no-endpoints": {VirtualServices: []reconcile.VirtualServiceState{
			wantVS("TCP", at(cip("no-endpoints"), 80), "ClusterIP"),
		}},
	}
	for name, s := range want {
		s.Service = ns + "/" + name
		want[name] = s
	}

	d := startE2E(t, srv.Admin, "node-a", "")
	opts := cmp.Options{
		cmpopts.SortSlices(func(a, b reconcile.VirtualServiceState) bool {
			return a.Kind+a.Address.String()+a.Protocol < b.Kind+b.Address.String()+b.Protocol
		}),
		cmpopts.EquateEmpty(),
		cmpopts.EquateComparable(netip.Addr{}, netip.AddrPort{}, netip.Prefix{}),
	}
	began := time.Now()
	poll(t, 2*time.Minute, func() error {
		got, err := d.applied(ns)
		if err != nil {
			return err
		}
		if diff := cmp.Diff(want, got, opts); diff != "" {
			return fmt.Errorf("applied table (-want +got):\n%s", diff)
		}
		return nil
	})
	t.Logf("%d Services applied as expected %s after the daemon started", len(want), time.Since(began).Round(time.Millisecond))
	d.waitReady(t, 30*time.Second)

	// The announcements and the dry-run table agree with the plan: the
	// kernel-side view has the foreign ingress IP but no announcement for
	// it.
	st, err := d.state()
	if err != nil {
		t.Fatal(err)
	}
	for name, list := range st.Announced {
		for _, a := range list {
			if a.Address == netip.MustParseAddr("203.0.113.20") {
				t.Errorf("announcer %s announces the foreign class's 203.0.113.20", name)
			}
		}
	}
	tables := d.dp.Tables()
	last := tables[len(tables)-1]
	for _, wantLine := range []string{
		"TCP 203.0.113.20:80 rr -> 10.1.3.1:8080/1",
		fmt.Sprintf("UDP %s rr -> 10.1.10.1:5353/1", at(cip("udp-sctp"), 53)),
		fmt.Sprintf("TCP %s rr persistent 600 -> 10.1.6.1:8080/1", at(cip("affinity"), 80)),
		fmt.Sprintf("TCP %s rr ->", at(cip("no-endpoints"), 80)),
	} {
		if !contains(last, wantLine) {
			t.Errorf("dry-run table lacks %q:\n%s", wantLine, d.dp.String())
		}
	}
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

// TestIntegrationE2ENodePortAddressesPrimary: with the default
// nodePortAddresses a NodePort opens on every InternalIP and ExternalIP of
// the Node; reloaded to [primary] it stays only on the first InternalIP of
// each family, and it moves when the Node's status lists another
// InternalIP first (the set of addresses unchanged).
func TestIntegrationE2ENodePortAddressesPrimary(t *testing.T) {
	srv := apitest.Start(t)
	ns := srv.Namespace(t)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
		{Type: corev1.NodeHostName, Address: "node-a"},
		{Type: corev1.NodeExternalIP, Address: "198.51.100.7"},
		{Type: corev1.NodeInternalIP, Address: "192.168.0.10"},
		{Type: corev1.NodeInternalIP, Address: "192.168.0.11"},
	}}}
	if _, err := srv.Client.CoreV1().Nodes().Create(t.Context(), node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svcs := createAll(t, srv.Client, ns, []*corev1.Service{
		e2eService("api", func(s *corev1.ServiceSpec) { s.Type = corev1.ServiceTypeNodePort }),
	}, []*discoveryv1.EndpointSlice{
		e2eSlice("api", "api-1", discoveryv1.AddressTypeIPv4, nil, readyAt("10.2.1.1", "node-a")),
	})
	port := uint16(svcs["api"].Spec.Ports[0].NodePort)

	d := startE2E(t, srv.Admin, "node-a", "")
	waitNodePorts := func(want ...string) {
		t.Helper()
		var wantAddrs []netip.AddrPort
		for _, a := range want {
			wantAddrs = append(wantAddrs, netip.AddrPortFrom(netip.MustParseAddr(a), port))
		}
		poll(t, 60*time.Second, func() error {
			st, err := d.applied(ns)
			if err != nil {
				return err
			}
			var got []netip.AddrPort
			for _, vs := range st["api"].VirtualServices {
				if vs.Kind == "NodePort" {
					got = append(got, vs.Address)
				}
			}
			slices.SortFunc(got, netip.AddrPort.Compare)
			if !slices.Equal(got, wantAddrs) {
				return fmt.Errorf("NodePorts of %s/api applied on %v, want %v", ns, got, wantAddrs)
			}
			return nil
		})
	}
	waitNodePorts("192.168.0.10", "192.168.0.11", "198.51.100.7")

	d.tc.Write(t, "dataplane:\n  mode: dryrun\n  nodePortAddresses: [primary]\n")
	waitNodePorts("192.168.0.10")

	n, err := srv.Client.CoreV1().Nodes().Get(t.Context(), "node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a := n.Status.Addresses
	a[2], a[3] = a[3], a[2]
	if _, err := srv.Client.CoreV1().Nodes().UpdateStatus(t.Context(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNodePorts("192.168.0.11")
}
