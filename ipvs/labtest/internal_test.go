package labtest

import (
	"net/netip"
	"testing"

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
