//go:build linux

package labtest

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/ipvs"
)

// countingFirewall counts the table writes.
type countingFirewall struct {
	ipvs.Firewall
	n atomic.Int32
}

func (c *countingFirewall) Sync(s ipvs.FirewallSpec) error {
	c.n.Add(1)
	return c.Firewall.Sync(s)
}

// nftGeneration is the kernel's nftables ruleset generation: every
// committed nftables transaction, in any table, increments it.
func nftGeneration(t *testing.T) uint32 {
	t.Helper()
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msgs, err := c.Execute(netlink.Message{
		Header: netlink.Header{
			Type:  netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETGEN),
			Flags: netlink.Request,
		},
		Data: []byte{unix.AF_UNSPEC, unix.NFNETLINK_V0, 0, 0}, // nfgenmsg
	})
	if err != nil {
		t.Fatalf("read the nftables generation: %v", err)
	}
	for _, m := range msgs {
		if len(m.Data) < 4 {
			continue
		}
		ad, err := netlink.NewAttributeDecoder(m.Data[4:])
		if err != nil {
			t.Fatal(err)
		}
		ad.ByteOrder = binary.BigEndian
		for ad.Next() {
			if ad.Type() == unix.NFTA_GEN_ID {
				return ad.Uint32()
			}
		}
	}
	t.Fatal("no NFTA_GEN_ID in the nftables generation answer")
	return 0
}

// deleteTable removes the dataplane's nftables table after a test.
func deleteTable(t *testing.T) {
	t.Helper()
	t.Cleanup(func() { deleteFirewallTable(t) })
}

func withFirewall(fw *countingFirewall) func(*ipvs.Config) {
	return func(c *ipvs.Config) {
		c.Firewall = fw
		c.Local.CIDRs = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/24"), netip.MustParsePrefix("fd00:244::/64")}
	}
}

// TestDataplaneRestartChangesNothing restarts the dataplane, with its
// nftables table, mid-traffic: the same plan changes no IPVS object, no
// address and no nftables object (the ruleset generation stays), and the
// established connection keeps working. A second restart whose plan drops
// the NodePort deletes that virtual service, found through the table's
// owned set, and keeps a foreign service on the same node address.
func TestDataplaneRestartChangesNothing(t *testing.T) {
	requireGuest(t)
	clearPlan(t)
	deleteTable(t)
	node := netip.MustParseAddr("10.244.0.1")
	foreign := ipvs.Service{VirtualServiceKey: model.VirtualServiceKey{Addr: node, Port: 30099, Protocol: model.TCP}, Scheduler: "rr"}
	addForeignService(t, foreign)

	nodePort := clusterIP("10.244.0.1", 30090, model.TCP, "rr", backends(false, HTTPPort, -1, 1, -1))
	nodePort.Kind = model.FrontendNodePort
	plan := planOf(map[string]model.VirtualService{
		"web": clusterIP("10.96.3.10", 80, model.TCP, "rr", backends(false, HTTPPort, 1, 1, -1)),
		"np":  nodePort,
	})
	fw := &countingFirewall{Firewall: ipvs.NewNFTables()}
	dp := newLabDataplane(t, withFirewall(fw))
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if name, src, err := Source(t.Context(), topo.Client, netip.MustParseAddrPort("10.244.0.1:30090")); err != nil || name != "be2" {
		t.Fatalf("NodePort before the restart: %s seen as %s, %v; want be2", name, src, err)
	}
	conn, first := dialFirst(t, netip.MustParseAddrPort("10.96.3.10:80"))
	table, addrs := kernelDump(t)
	gen := nftGeneration(t)

	// Restart with the same plan.
	dp.Close()
	fw2 := &countingFirewall{Firewall: ipvs.NewNFTables()}
	dp2 := newLabDataplane(t, withFirewall(fw2))
	if err := dp2.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatalf("Apply after restart: %v", err)
	}
	if err := dp2.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatalf("second Full after restart: %v", err)
	}
	if n, w := dp2.changes(), fw2.n.Load(); n != 0 || w != 0 {
		t.Errorf("restart with the same plan: %d IPVS/address changes and %d table writes, want 0 and 0", n, w)
	}
	table2, addrs2 := kernelDump(t)
	if diff := cmp.Diff(table, table2, cmpLab); diff != "" {
		t.Errorf("IPVS table across the restart (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(addrs, addrs2, cmpLab); diff != "" {
		t.Errorf("switchyard0 addresses across the restart (-before +after):\n%s", diff)
	}
	if g := nftGeneration(t); g != gen {
		t.Errorf("nftables generation went from %d to %d across the restart: a table was rewritten", gen, g)
	}
	if again, err := conn.Get(); err != nil || again != first {
		t.Errorf("established connection after the restart: answer %q, %v; want %q", again, err, first)
	}

	// Restart with a plan that no longer has the NodePort.
	dp2.Close()
	delete(plan.Services, svcKey("np"))
	dp3 := newLabDataplane(t, withFirewall(&countingFirewall{Firewall: ipvs.NewNFTables()}))
	if err := dp3.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatalf("Apply without the NodePort: %v", err)
	}
	table3, _ := kernelDump(t)
	var names []string
	for name := range table3 {
		names = append(names, name)
	}
	if _, ok := findService(table3, "TCP/10.244.0.1:30090 "); ok {
		t.Errorf("the dropped NodePort survived the restart: %v", names)
	}
	if _, ok := findService(table3, "TCP/10.244.0.1:30099 "); !ok {
		t.Errorf("the foreign service on the node address is gone: %v", names)
	}
	if _, ok := findService(table3, "TCP/10.96.3.10:80 "); !ok {
		t.Errorf("the ClusterIP is gone: %v", names)
	}
}

// findService finds a kernelDump entry by its "PROTO/addr:port " prefix.
func findService(table map[string][]ipvs.Destination, prefix string) ([]ipvs.Destination, bool) {
	for name, ds := range table {
		if len(name) >= len(prefix) && name[:len(prefix)] == prefix {
			return ds, true
		}
	}
	return nil, false
}

// TestDataplaneHairpin connects a backend to its own Service whose only
// endpoint it is: the connection is masqueraded to the node's address on
// the backend's link, or the answer would bypass IPVS and never match.
// The same goes for IPv6.
func TestDataplaneHairpin(t *testing.T) {
	requireGuest(t)
	clearPlan(t)
	deleteTable(t)
	plan := planOf(map[string]model.VirtualService{
		"self":  clusterIP("10.96.3.20", 80, model.TCP, "rr", backends(false, HTTPPort, 1, -1, -1)),
		"self6": clusterIP("fd00:96::3:20", 80, model.TCP, "rr", backends(true, HTTPPort, 1, -1, -1)),
	})
	// Cluster CIDRs that hold the backends: only the hairpin rule
	// masquerades be1's traffic to its own ClusterIP.
	dp := newLabDataplane(t, func(c *ipvs.Config) {
		c.Firewall = ipvs.NewNFTables()
		c.Local.CIDRs = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:244::/32")}
	})
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	be1 := topo.Backends[0]
	// Another pod reaching the Service keeps its source: only the
	// hairpin case is masqueraded.
	be2 := topo.Backends[1]
	if name, src, err := Source(t.Context(), be2.NS, netip.MustParseAddrPort("10.96.3.20:80")); err != nil || src != be2.IPv4 {
		t.Errorf("be2 to the Service: %s saw %s, %v; want be1 seeing %s", name, src, err, be2.IPv4)
	}
	for _, tc := range []struct {
		target string
		want   netip.Addr
	}{
		{"10.96.3.20:80", netip.MustParseAddr("10.244.1.1")},
		{"[fd00:96::3:20]:80", netip.MustParseAddr("fd00:244:1::1")},
	} {
		name, src, err := Source(t.Context(), be1.NS, netip.MustParseAddrPort(tc.target))
		if err != nil {
			t.Errorf("be1 to its own Service %s: %v", tc.target, err)
			continue
		}
		if name != "be1" || src != tc.want {
			t.Errorf("be1 to its own Service %s: answered by %s, seen as %s; want be1 seen as %s", tc.target, name, src, tc.want)
		}
	}
}

// TestDataplaneEndpointChangeKeepsTable changes a Service's endpoints: the
// table's hairpin set follows, without rewriting the table. An element
// planted in another set proves it: a rewrite would drop it, as the next
// full resync does.
func TestDataplaneEndpointChangeKeepsTable(t *testing.T) {
	requireGuest(t)
	clearPlan(t)
	deleteTable(t)
	plan := planOf(map[string]model.VirtualService{
		"web": clusterIP("10.96.3.50", 80, model.TCP, "rr", backends(false, HTTPPort, 1, -1, -1)),
	})
	fw := &countingFirewall{Firewall: ipvs.NewNFTables()}
	dp := newLabDataplane(t, withFirewall(fw))
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseLasting()
	table := &nftables.Table{Name: ipvs.TableName, Family: nftables.TableFamilyINet}
	elements := func(name string) map[string]bool {
		t.Helper()
		set, err := c.GetSetByName(table, name)
		if err != nil {
			t.Fatalf("set %s: %v", name, err)
		}
		elems, err := c.GetSetElements(set)
		if err != nil {
			t.Fatalf("set %s: %v", name, err)
		}
		out := map[string]bool{}
		for _, e := range elems {
			out[fmt.Sprintf("%x", e.Key)] = true
		}
		return out
	}
	hairpin := func(a netip.Addr) string { return fmt.Sprintf("%x%x", a.AsSlice(), a.AsSlice()) }
	planted := nftables.SetElement{Key: []byte{192, 0, 2, 99, unix.IPPROTO_TCP, 0, 0, 0, 0, 1, 0, 0}}
	np, err := c.GetSetByName(table, "nodeports4")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetAddElements(np, []nftables.SetElement{planted}); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatalf("plant an element: %v", err)
	}

	be1, be2 := topo.Backends[0].IPv4, topo.Backends[1].IPv4
	plan.Services[svcKey("web")].VirtualServices[0].Destinations = backends(false, HTTPPort, -1, 1, -1)
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Changed: []model.ServiceKey{svcKey("web")}}); err != nil {
		t.Fatalf("Apply the endpoint change: %v", err)
	}
	if got := elements("hairpin4"); !got[hairpin(be2)] || got[hairpin(be1)] {
		t.Errorf("hairpin4 after the change = %v, want be2's element (%s) and not be1's", got, hairpin(be2))
	}
	if !elements("nodeports4")[fmt.Sprintf("%x", planted.Key)] {
		t.Error("the planted element is gone: the endpoint change rewrote the table")
	}
	if n := fw.n.Load(); n != 1 {
		t.Errorf("%d firewall syncs, want 1 (the first apply; the endpoint change is an update)", n)
	}
	// A full resync finds the planted element, which the spec lacks, and
	// rewrites the table without it.
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatalf("Full after the endpoint change: %v", err)
	}
	if elements("nodeports4")[fmt.Sprintf("%x", planted.Key)] {
		t.Error("the planted element survived a full resync")
	}
	if got := elements("hairpin4"); !got[hairpin(be2)] || got[hairpin(be1)] {
		t.Errorf("hairpin4 after the full resync = %v, want be2's element (%s) and not be1's", got, hairpin(be2))
	}
	// be2 reaching its own Service now is masqueraded.
	name, src, err := Source(t.Context(), topo.Backends[1].NS, netip.MustParseAddrPort("10.96.3.50:80"))
	if err != nil || name != "be2" || src != netip.MustParseAddr("10.244.2.1") {
		t.Errorf("be2 to its own Service: %s saw %s, %v; want be2 seeing 10.244.2.1", name, src, err)
	}
}
