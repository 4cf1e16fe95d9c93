//go:build linux

package labtest

import (
	"context"
	"net/netip"
	"testing"
	"time"

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

// TestDataplaneSCTPAffinity checks ClientIP session affinity for SCTP over
// IPv4 and IPv6: IPVS holds the persistence timeout, and every new
// association from one client, each from its own source port, reaches one
// backend, while the same backends without affinity share them evenly.
func TestDataplaneSCTPAffinity(t *testing.T) {
	requireGuest(t)
	if !topo.SCTP {
		t.Fatal("the guest kernel has no SCTP sockets: is sctp in test/lab's module list?")
	}
	clearPlan(t)
	sticky := func(vip string, v6 bool) model.VirtualService {
		vs := clusterIP(vip, SCTPPort, model.SCTP, "rr", backends(v6, SCTPPort, 1, 1, 1))
		vs.AffinityTimeout = 3 * time.Hour
		return vs
	}
	plan := planOf(map[string]model.VirtualService{
		"sticky":  sticky("10.96.3.40", false),
		"sticky6": sticky("fd00:96::3:40", true),
		"spread":  clusterIP("10.96.3.41", SCTPPort, model.SCTP, "rr", backends(false, SCTPPort, 1, 1, 1)),
	})
	dp := newLabDataplane(t)
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	table, _ := kernelDump(t)
	for _, name := range []string{
		"SCTP/10.96.3.40:9132 rr flags=0x1 persist=3h0m0s",
		"SCTP/fd00:96::3:40:9132 rr flags=0x1 persist=3h0m0s",
		"SCTP/10.96.3.41:9132 rr flags=0x0 persist=0s",
	} {
		if _, ok := table[name]; !ok {
			t.Errorf("IPVS has no %s; it has %v", name, table)
		}
	}
	for _, tc := range []struct {
		name   string
		from   *Namespace
		target string
		n      int
	}{
		{"IPv4 from a pod", topo.Client, "10.96.3.40", 9},
		{"IPv4 from the node", Root, "10.96.3.40", 6},
		{"IPv6 from a pod", topo.Client, "fd00:96::3:40", 9},
	} {
		got, err := SplitSCTP(tc.from, netip.AddrPortFrom(netip.MustParseAddr(tc.target), SCTPPort), tc.n)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if len(got) != 1 {
			t.Errorf("%s: associations per backend %v, want all %d on one backend", tc.name, got, tc.n)
		}
	}
	got, err := SplitSCTP(topo.Client, netip.AddrPortFrom(netip.MustParseAddr("10.96.3.41"), SCTPPort), 9)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int{"be1": 3, "be2": 3, "be3": 3}, got); diff != "" {
		t.Errorf("without affinity: associations per backend (-want +got):\n%s", diff)
	}
}

// TestDataplaneIPv6SourceRanges checks loadBalancerSourceRanges on IPv6
// LoadBalancer IPs: the client (fd00:244::2, also 10.244.0.2) passes a
// /64 written with host bits set and an exact /128; it is dropped by
// ranges that do not cover its IPv6 address, even when an IPv4 range
// covers its IPv4 address (a range admits only its own family), and
// passes once its /64 is added to them.
func TestDataplaneIPv6SourceRanges(t *testing.T) {
	requireGuest(t)
	clearPlan(t)
	deleteTable(t)
	lb := func(vip string, backend int, ranges ...string) model.VirtualService {
		w := []int{-1, -1, -1}
		w[backend] = 1
		vs := clusterIP(vip, 80, model.TCP, "rr", backends(true, HTTPPort, w...))
		vs.Kind = model.FrontendLoadBalancer
		for _, r := range ranges {
			vs.SourceRanges = append(vs.SourceRanges, netip.MustParsePrefix(r))
		}
		return vs
	}
	plan := planOf(map[string]model.VirtualService{
		"subnet": lb("fd00:96::4:1", 0, "2001:db8::/32", "fd00:244::ffff/64"),
		"exact":  lb("fd00:96::4:2", 1, "10.0.0.0/8", "fd00:244::2/128"),
		"denied": lb("fd00:96::4:3", 2, "10.244.0.0/24", "2001:db8::/32", "fd00:244::3/128"),
	})
	dp := newLabDataplane(t, withFirewall(&countingFirewall{Firewall: ipvs.NewNFTables()}))
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	for _, tc := range []struct {
		name, target, want string
	}{
		{"inside a /64 with host bits", "[fd00:96::4:1]:80", "be1"},
		{"the client's own /128", "[fd00:96::4:2]:80", "be2"},
	} {
		name, _, err := Source(t.Context(), topo.Client, netip.MustParseAddrPort(tc.target))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if diff := cmp.Diff(tc.want, name); diff != "" {
			t.Errorf("%s: answering backend (-want +got):\n%s", tc.name, diff)
		}
	}
	// Outside the ranges the SYN is dropped: no answer within a second,
	// where an allowed connection takes milliseconds.
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if name, src, err := Source(ctx, topo.Client, netip.MustParseAddrPort("[fd00:96::4:3]:80")); err == nil {
		t.Errorf("a client outside the IPv6 loadBalancerSourceRanges got an answer from %s (seen as %s)", name, src)
	}
	// The same service with the client's /64 added answers: the drop was
	// the ranges' doing.
	denied := &plan.Services[svcKey("denied")].VirtualServices[0]
	denied.SourceRanges = append(denied.SourceRanges, netip.MustParsePrefix("fd00:244::/64"))
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Changed: []model.ServiceKey{svcKey("denied")}}); err != nil {
		t.Fatalf("Apply with the client's range added: %v", err)
	}
	if name, _, err := Source(t.Context(), topo.Client, netip.MustParseAddrPort("[fd00:96::4:3]:80")); err != nil || name != "be3" {
		t.Errorf("after adding the client's /64 to the ranges: answer %q, %v; want be3", name, err)
	}
}
