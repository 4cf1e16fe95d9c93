package cluster_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/switchyard-lb/switchyard/test/cluster"
)

// refusedWithin bounds how long a check that must fail may take: a
// refused connection fails at once, so a few answers' worth.
const refusedWithin = 5 * time.Second

// withClusterCIDRs returns the cluster's default daemon config with
// dataplane.clusterCIDRs set: the dataplane then tells pods (a source
// in the CIDR) from the outside.
func withClusterCIDRs(t *testing.T, cidr netip.Prefix) string {
	t.Helper()
	cfg := strings.Replace(cluster.DefaultDaemonConfig, "dataplane:\n",
		fmt.Sprintf("dataplane:\n  clusterCIDRs: [%s]\n", cidr), 1)
	if cfg == cluster.DefaultDaemonConfig {
		t.Fatal("the default daemon config has no dataplane section to extend")
	}
	return cfg
}

// TestLocalAddressesFromInsideTheCluster (issue 10's and 11's in-cluster
// access to an externalTrafficPolicy Local LoadBalancer IP, k/k#93456): a
// LoadBalancer Service with ETP Local, an external IP and an ingress IP,
// whose only endpoint runs on node2. From node1, which has no local
// endpoint, its host network reaches both addresses and is answered by
// node2's pod (masqueraded to node1's address, since its source would be
// the address itself, which node2 holds too); with cluster CIDRs
// configured a pod on node1 does too, keeping its own address. The outside
// client, routed through node1, is refused there (external traffic sees
// local endpoints only); routed through node2 it is answered with its own
// address kept. With the default config (detect-local mode NodeCIDR, the
// Nodes having podCIDRs) a pod on node1 is an in-cluster client too;
// without a local detector it cannot be told from the outside and is
// refused like it, as with kube-proxy without one.
func TestLocalAddressesFromInsideTheCluster(t *testing.T) {
	c := requireGuest(t)
	node1, node2 := c.Nodes[0], c.Nodes[1]
	pod := node2.Pods[0]
	externalIP, ingressIP := netip.MustParseAddr("198.51.100.20"), netip.MustParseAddr("198.51.100.21")
	svc, err := c.CreateService(t.Context(), namespace(t, c), cluster.ServiceSpec{
		Name: "lb-local", Type: corev1.ServiceTypeLoadBalancer,
		ETP:         corev1.ServiceExternalTrafficPolicyLocal,
		ExternalIPs: []netip.Addr{externalIP}, IngressIP: ingressIP,
		Endpoints: []cluster.Endpoint{{Pod: pod}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, a := range []netip.Addr{externalIP, ingressIP} {
			if err := c.RouteThrough(a, nil); err != nil {
				t.Error(err)
			}
		}
	})
	addrs := map[string]netip.Addr{"external IP": externalIP, "ingress IP": ingressIP}
	seenAs := func(want netip.Addr) func(cluster.Answer) error {
		return func(a cluster.Answer) error {
			if err := answeredBy(pod)(a); err != nil {
				return err
			}
			if a.Client.Addr() != want {
				return fmt.Errorf("%s saw the client as %s, want %s", a.Pod, a.Client.Addr(), want)
			}
			return nil
		}
	}
	refused := func(from *cluster.Namespace, what string, target netip.AddrPort) {
		t.Helper()
		if a, err := waitAnswer(t.Context(), from, target, refusedWithin, answeredBy(pod)); err == nil {
			t.Errorf("%s from %s: answered by %s; want no answer (no local endpoint)", what, from.Name, a.Pod)
		} else {
			t.Logf("%s from %s, as it should: %v", what, from.Name, err)
		}
	}

	// node1's host network: both addresses, node2's pod answers,
	// masqueraded to node1's own address.
	for what, a := range addrs {
		if _, err := waitAnswer(t.Context(), node1.NS, svc.AddrOn(a, cluster.PortHTTP), programmed, seenAs(node1.Addr)); err != nil {
			t.Fatalf("%s from %s's host network: %v", what, node1.Name, err)
		}
	}
	checkFlows(t, node1.NS, "tcp", cluster.TrafficSpec{Target: svc.AddrOn(ingressIP, cluster.PortTCP), Flows: 10}, pod,
		func(f cluster.Flow) error {
			if f.Client.Addr() != node1.Addr {
				return fmt.Errorf("pod saw the client as %s, want %s", f.Client.Addr(), node1.Addr)
			}
			return nil
		})

	// The outside client: through node1 refused, through node2 answered
	// with its own address.
	for what, a := range addrs {
		if err := c.RouteThrough(a, node1); err != nil {
			t.Fatal(err)
		}
		refused(c.Client, what+" through "+node1.Name, svc.AddrOn(a, cluster.PortHTTP))
		if err := c.RouteThrough(a, node2); err != nil {
			t.Fatal(err)
		}
		if _, err := waitAnswer(t.Context(), c.Client, svc.AddrOn(a, cluster.PortHTTP), programmed, seenAs(cluster.ClientAddr)); err != nil {
			t.Errorf("%s through %s: %v", what, node2.Name, err)
		}
	}

	// A pod on node1 with the default config (detect-local mode
	// NodeCIDR: its Node's spec.podCIDRs tell pods): an in-cluster
	// client, answered by node2's pod with its own address kept.
	client := node1.Pods[0]
	for what, a := range addrs {
		if _, err := waitAnswer(t.Context(), client.NS, svc.AddrOn(a, cluster.PortHTTP), programmed, seenAs(client.Addr)); err != nil {
			t.Errorf("%s from %s with the default config (NodeCIDR): %v", what, client.Name, err)
		}
	}

	// node1's daemon restarted with config (the default's for the other
	// suites once the test is over).
	restart := func(config string) {
		t.Helper()
		if err := node1.StopDaemon(); err != nil {
			t.Fatal(err)
		}
		node1.SetDaemonConfig(config)
		if err := node1.StartDaemon(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		node1.SetDaemonConfig("")
		if err := node1.StopDaemon(); err != nil {
			t.Error(err)
		}
		// t.Context() is done by now.
		if err := node1.StartDaemon(context.Background()); err != nil {
			t.Error(err)
		}
	})

	// Without a local detector (mode ClusterCIDR, no cluster CIDRs) a
	// pod cannot be told from the outside and is refused like it, as
	// with kube-proxy without a local detector.
	restart(strings.Replace(cluster.DefaultDaemonConfig, "dataplane:\n", "dataplane:\n  detectLocal: {mode: ClusterCIDR}\n", 1))
	for what, a := range addrs {
		refused(client.NS, what+" (no local detector)", svc.AddrOn(a, cluster.PortHTTP))
	}

	// node1's daemon with cluster CIDRs: its pods are in-cluster clients
	// and reach node2's pod unmasqueraded; the outside is still refused.
	restart(withClusterCIDRs(t, cluster.ClusterCIDR))
	for what, a := range addrs {
		if _, err := waitAnswer(t.Context(), client.NS, svc.AddrOn(a, cluster.PortHTTP), programmed, seenAs(client.Addr)); err != nil {
			t.Errorf("%s from %s with cluster CIDRs: %v", what, client.Name, err)
		}
	}
	checkFlows(t, client.NS, "udp", cluster.TrafficSpec{Target: svc.AddrOn(externalIP, cluster.PortUDP), Flows: 10}, pod,
		func(f cluster.Flow) error {
			if f.Client.Addr() != client.Addr {
				return fmt.Errorf("pod saw the client as %s, want %s", f.Client.Addr(), client.Addr)
			}
			return nil
		})
	for what, a := range addrs {
		if err := c.RouteThrough(a, node1); err != nil {
			t.Fatal(err)
		}
		refused(c.Client, what+" through "+node1.Name+" with cluster CIDRs", svc.AddrOn(a, cluster.PortHTTP))
	}
	if _, err := waitAnswer(t.Context(), node1.NS, svc.AddrOn(ingressIP, cluster.PortHTTP), programmed, seenAs(node1.Addr)); err != nil {
		t.Errorf("ingress IP from %s's host network with cluster CIDRs: %v", node1.Name, err)
	}
}
