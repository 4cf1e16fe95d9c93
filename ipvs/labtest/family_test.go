//go:build linux

package labtest

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/ipvs"
)

// TestDataplaneIPv6Masquerade sends IPv6 traffic through NodePorts,
// a LoadBalancer IP and a ClusterIP with the nftables table: Cluster
// policies are masqueraded to the node's address on the backend's link,
// Local ones and pod clients keep their address.
func TestDataplaneIPv6Masquerade(t *testing.T) {
	requireGuest(t)
	clearPlan(t)
	deleteTable(t)
	node6 := "fd00:244::1" // the node's address on the client's link
	plan := planOf(map[string]model.VirtualService{
		"cip6":    frontend("fd00:96::3:40", 80, model.FrontendClusterIP, false, backends(true, HTTPPort, 1, -1, -1)),
		"lb6":     frontend("fd00:96::3:41", 80, model.FrontendLoadBalancer, false, backends(true, HTTPPort, -1, -1, 1)),
		"np6":     frontend(node6, 30092, model.FrontendNodePort, false, backends(true, HTTPPort, -1, 1, -1)),
		"np6-loc": frontend(node6, 30093, model.FrontendNodePort, true, backends(true, HTTPPort, -1, 1, -1)),
	})
	dp := newLabDataplane(t, withFirewall(&countingFirewall{Firewall: ipvs.NewNFTables()}))
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	checkSources(t, "", []sourceCase{
		{"ClusterIP from a pod keeps its source", topo.Client, "[fd00:96::3:40]:80", seenBy{"be1", topo.ClientIPv6}},
		{"ClusterIP from the node is masqueraded", Root, "[fd00:96::3:40]:80", seenBy{"be1", netip.MustParseAddr("fd00:244:1::1")}},
		{"LoadBalancer Cluster is masqueraded", topo.Client, "[fd00:96::3:41]:80", seenBy{"be3", netip.MustParseAddr("fd00:244:3::1")}},
		{"NodePort Cluster is masqueraded", topo.Client, "[fd00:244::1]:30092", seenBy{"be2", netip.MustParseAddr("fd00:244:2::1")}},
		{"NodePort Local keeps the client", topo.Client, "[fd00:244::1]:30093", seenBy{"be2", topo.ClientIPv6}},
	})
}

// TestDataplaneSCTP balances SCTP associations over IPv4 and IPv6
// ClusterIPs and an SCTP NodePort, from a pod and from the node.
func TestDataplaneSCTP(t *testing.T) {
	requireGuest(t)
	if !topo.SCTP {
		t.Fatal("the guest kernel has no SCTP sockets: is sctp in test/lab's module list?")
	}
	clearPlan(t)
	deleteTable(t)
	np := clusterIP("10.244.0.1", 30094, model.SCTP, "rr", backends(false, SCTPPort, 1, 1, -1))
	np.Kind = model.FrontendNodePort
	plan := planOf(map[string]model.VirtualService{
		"sctp":  clusterIP("10.96.3.30", SCTPPort, model.SCTP, "rr", backends(false, SCTPPort, 1, 1, 1)),
		"sctp6": clusterIP("fd00:96::3:30", SCTPPort, model.SCTP, "rr", backends(true, SCTPPort, 1, 1, 1)),
		"np":    np,
	})
	dp := newLabDataplane(t, withFirewall(&countingFirewall{Firewall: ipvs.NewNFTables()}))
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	for _, tc := range []struct {
		name   string
		from   *Namespace
		target netip.AddrPort
		n      int
		want   map[string]int
	}{
		{"IPv4 ClusterIP from a pod", topo.Client, netip.AddrPortFrom(netip.MustParseAddr("10.96.3.30"), SCTPPort), 15,
			map[string]int{"be1": 5, "be2": 5, "be3": 5}},
		{"IPv4 ClusterIP from the node", Root, netip.AddrPortFrom(netip.MustParseAddr("10.96.3.30"), SCTPPort), 6,
			map[string]int{"be1": 2, "be2": 2, "be3": 2}},
		{"IPv6 ClusterIP from a pod", topo.Client, netip.AddrPortFrom(netip.MustParseAddr("fd00:96::3:30"), SCTPPort), 15,
			map[string]int{"be1": 5, "be2": 5, "be3": 5}},
		{"IPv4 NodePort from a client", topo.Client, netip.MustParseAddrPort("10.244.0.1:30094"), 10,
			map[string]int{"be1": 5, "be2": 5}},
	} {
		got, err := SplitSCTP(tc.from, tc.target, tc.n)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s: associations per backend (-want +got):\n%s", tc.name, diff)
		}
	}
}
