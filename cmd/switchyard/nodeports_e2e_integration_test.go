//go:build integration

package main

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchyard-lb/switchyard/test/apitest"
)

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
