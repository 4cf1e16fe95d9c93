package labtest

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/ipvs"
)

// TestDataplaneInternalTraffic: with externalTrafficPolicy Local, traffic
// to a LoadBalancer IP or an external IP from inside the cluster (a pod:
// a source in the cluster CIDRs; the node itself) goes to any endpoint
// (the plan's Internal set, a firewall-mark service), while traffic from
// outside sees only the local endpoints and keeps its source address
// (k/k#93456). The node's own traffic is masqueraded (its source would be
// the frontend's address, which every node holds), a pod's is not.
//
// The LoadBalancer frontend has no local endpoint (Destinations empty)
// and be2 elsewhere; the external IP has be1 locally and be3 elsewhere.
// The client namespace is a pod first (cluster CIDR 10.244.0.0/24), then,
// after a restart with another cluster CIDR, a client outside.
func TestDataplaneInternalTraffic(t *testing.T) {
	requireGuest(t)
	clearPlan(t)
	t.Cleanup(func() { deleteFirewallTable(t) })
	local := func(vip string, kind model.FrontendKind, dests, internal []model.Destination) model.VirtualService {
		vs := clusterIP(vip, 80, model.TCP, "rr", dests)
		vs.Kind, vs.Local, vs.Internal = kind, true, internal
		return vs
	}
	plan := planOf(map[string]model.VirtualService{
		"lb":  local("10.96.3.1", model.FrontendLoadBalancer, nil, backends(false, HTTPPort, -1, 1, -1)),
		"eip": local("10.96.3.2", model.FrontendExternalIP, backends(false, HTTPPort, 1, -1, -1), backends(false, HTTPPort, -1, -1, 1)),
	})
	apply := func(cidr string) {
		t.Helper()
		dp := newLabDataplane(t, func(c *ipvs.Config) {
			c.Firewall = ipvs.NewNFTables()
			c.Local.CIDRs = []netip.Prefix{netip.MustParsePrefix(cidr)}
		})
		if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
			t.Fatalf("Apply: %v", err)
		}
	}
	apply("10.244.0.0/24")
	checkSources(t, "client in the cluster CIDR", []sourceCase{
		{"a pod reaches the LoadBalancer IP's remote endpoint, unmasqueraded", topo.Client, "10.96.3.1:80", seenBy{"be2", topo.ClientIPv4}},
		{"the node reaches it, masqueraded", Root, "10.96.3.1:80", seenBy{"be2", netip.MustParseAddr("10.244.2.1")}},
		{"a pod reaches the external IP's cluster-wide set", topo.Client, "10.96.3.2:80", seenBy{"be3", topo.ClientIPv4}},
		{"the node reaches it, masqueraded", Root, "10.96.3.2:80", seenBy{"be3", netip.MustParseAddr("10.244.3.1")}},
	})
	apply("10.244.9.0/24")
	checkSources(t, "client outside the cluster CIDR", []sourceCase{
		{"an outside client is refused at the LoadBalancer IP without local endpoint", topo.Client, "10.96.3.1:80", seenBy{}},
		{"an outside client gets the external IP's local endpoint, keeping its address", topo.Client, "10.96.3.2:80", seenBy{"be1", topo.ClientIPv4}},
		{"the node still reaches the LoadBalancer IP's remote endpoint", Root, "10.96.3.1:80", seenBy{"be2", netip.MustParseAddr("10.244.2.1")}},
	})
}

// TestDataplaneDetectLocal checks each kind of local traffic detector
// (kube-proxy's detect-local modes) in the kernel: ClusterIP traffic from
// the client namespace (a pod behind the veth sy-client, 10.244.0.2 and
// fd00:244::2) keeps its source when the detector takes it for a pod and
// is masqueraded to the node's address on the backend's link otherwise;
// the node's own is always masqueraded. A family the detector has nothing
// for falls back to masquerading only the node's own (the IPv6 column of
// the IPv4-only CIDR rows). One dataplane is handed each detector in turn
// (SetLocalDetector, as NodeCIDR follows the Node): the table follows.
func TestDataplaneDetectLocal(t *testing.T) {
	requireGuest(t)
	clearPlan(t)
	t.Cleanup(func() { deleteFirewallTable(t) })
	plan := planOf(map[string]model.VirtualService{
		"cip":  clusterIP("10.96.1.70", 80, model.TCP, "rr", backends(false, HTTPPort, 1, -1, -1)),
		"cip6": clusterIP("fd00:96::1:70", 80, model.TCP, "rr", backends(true, HTTPPort, 1, -1, -1)),
	})
	dp := newLabDataplane(t, func(c *ipvs.Config) { c.Firewall = ipvs.NewNFTables() })
	masq4, masq6 := netip.MustParseAddr("10.244.1.1"), netip.MustParseAddr("fd00:244:1::1")
	type seen struct{ Client4, Client6, Node4 netip.Addr }
	for _, tc := range []struct {
		name string
		det  ipvs.LocalDetector
		want seen
	}{
		{"no detector", ipvs.LocalDetector{}, seen{topo.ClientIPv4, topo.ClientIPv6, masq4}},
		{"the pod's CIDR (NodeCIDR)", ipvs.LocalDetector{CIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/24")}},
			seen{topo.ClientIPv4, topo.ClientIPv6, masq4}},
		{"another CIDR", ipvs.LocalDetector{CIDRs: []netip.Prefix{netip.MustParsePrefix("10.245.0.0/16")}},
			seen{masq4, topo.ClientIPv6, masq4}},
		{"both families' CIDRs", ipvs.LocalDetector{CIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/24"), netip.MustParsePrefix("fd00:244::/64")}},
			seen{topo.ClientIPv4, topo.ClientIPv6, masq4}},
		{"the pod's interface (BridgeInterface)", ipvs.LocalDetector{Interface: "sy-client"},
			seen{topo.ClientIPv4, topo.ClientIPv6, masq4}},
		{"an interface that does not exist", ipvs.LocalDetector{Interface: "cni0"}, seen{masq4, masq6, masq4}},
		{"a prefix of the pod's interface (InterfaceNamePrefix)", ipvs.LocalDetector{InterfacePrefix: "sy-cl"},
			seen{topo.ClientIPv4, topo.ClientIPv6, masq4}},
		{"another prefix", ipvs.LocalDetector{InterfacePrefix: "veth"}, seen{masq4, masq6, masq4}},
		{"the pod's name as a prefix is no exact name", ipvs.LocalDetector{Interface: "sy-cl"}, seen{masq4, masq6, masq4}},
	} {
		dp.SetLocalDetector(tc.det)
		if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
			t.Fatalf("%s: Apply: %v", tc.name, err)
		}
		var got seen
		for _, c := range []struct {
			from   *Namespace
			target string
			src    *netip.Addr
		}{
			{topo.Client, "10.96.1.70:80", &got.Client4},
			{topo.Client, "[fd00:96::1:70]:80", &got.Client6},
			{Root, "10.96.1.70:80", &got.Node4},
		} {
			name, src, err := Source(t.Context(), c.from, netip.MustParseAddrPort(c.target))
			if err != nil {
				t.Fatalf("%s: %s from %s: %v", tc.name, c.target, c.from.Name, err)
			}
			if name != "be1" {
				t.Errorf("%s: %s from %s answered by %s, want be1", tc.name, c.target, c.from.Name, name)
			}
			*c.src = src
		}
		if diff := cmp.Diff(tc.want, got, cmpLab); diff != "" {
			t.Errorf("%s: sources the backend saw (-want +got):\n%s", tc.name, diff)
		}
	}
}
