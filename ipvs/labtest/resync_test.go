//go:build linux

package labtest

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/nftables"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/ipvs"
)

// TestDataplaneFullResyncRepairs changes the kernel behind the
// dataplane's back, as an administrator would: a real server deleted
// (ipvsadm -d), a service address removed from switchyard0, elements
// removed from the nftables table, a real server deleted from each
// firewall-mark service. The periodic full resync, which reads the real
// servers from /proc/net/ip_vs in one pass (the firewall-mark services'
// too), puts every one of them back, and what it read agrees with the
// per-service dumps.
func TestDataplaneFullResyncRepairs(t *testing.T) {
	requireGuest(t)
	clearPlan(t)
	deleteTable(t)
	vip4, vip6 := netip.MustParseAddr("10.96.3.60"), netip.MustParseAddr("fd00:96::60")
	plan := planOf(map[string]model.VirtualService{
		"web":  clusterIP(vip4.String(), 80, model.TCP, "rr", backends(false, HTTPPort, 1, 2, -1)),
		"web6": clusterIP(vip6.String(), 80, model.TCP, "rr", backends(true, HTTPPort, 1, -1, 3)),
		"dns":  clusterIP("10.96.3.61", 53, model.UDP, "rr", backends(false, UDPPort, -1, 1, -1)),
		// externalTrafficPolicy Local frontends: their in-cluster traffic
		// has a firewall-mark service, one per family.
		"lb":  internal(frontend("10.96.3.62", 80, model.FrontendLoadBalancer, true, nil), backends(false, HTTPPort, 1, 2, -1)),
		"lb6": internal(frontend("fd00:96::62", 80, model.FrontendLoadBalancer, true, nil), backends(true, HTTPPort, -1, 1, 1)),
	})
	// A suite before may have left firewall-mark services behind (foreign
	// once its table was deleted): gone, so that the ones below are this
	// suite's.
	deleteMarkServices(t)
	fw := &countingFirewall{Firewall: ipvs.NewNFTables()}
	dp := newLabDataplane(t, withFirewall(fw))
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	wantTable, wantAddrs := kernelDump(t)

	// What one pass over /proc/net/ip_vs reads is what the dumps read.
	k, err := ipvs.NewNetlink()
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	read, err := k.ReadTable()
	if err != nil {
		t.Fatalf("ReadTable: %v", err)
	}
	svcs, err := k.Services()
	if err != nil {
		t.Fatal(err)
	}
	var marks []model.VirtualServiceKey
	for _, s := range svcs {
		if _, mark := ipvs.MarkOf(s.VirtualServiceKey); mark {
			marks = append(marks, s.VirtualServiceKey)
		}
		dumped, err := k.Destinations(s.VirtualServiceKey)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := read[s.VirtualServiceKey]; !ok {
			t.Errorf("ReadTable left %v out", s.VirtualServiceKey)
		}
		if diff := cmp.Diff(dests(dumped), dests(read[s.VirtualServiceKey]), cmpLab); diff != "" {
			t.Errorf("ReadTable of %v (-dumped +read):\n%s", s.VirtualServiceKey, diff)
		}
	}
	if len(marks) != 2 {
		t.Fatalf("firewall-mark services %v, want one per family", marks)
	}

	// The outside changes.
	web := model.VirtualServiceKey{Addr: vip4, Port: 80, Protocol: model.TCP}
	if err := k.DeleteDestination(web, ipvs.DestinationKey{Addr: topo.Backends[1].IPv4, Port: HTTPPort}); err != nil {
		t.Fatalf("delete a real server: %v", err)
	}
	for _, m := range marks {
		if err := k.DeleteDestination(m, ipvs.DestinationKey{Addr: backends(m.Addr.Is6(), HTTPPort, -1, 1)[0].Addr, Port: HTTPPort}); err != nil {
			t.Fatalf("delete a real server of %v: %v", m, err)
		}
	}
	if err := topo.DelVIP(vip6); err != nil {
		t.Fatal(err)
	}
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseLasting()
	table := &nftables.Table{Name: ipvs.TableName, Family: nftables.TableFamilyINet}
	be0 := topo.Backends[0].IPv4
	for name, key := range map[string][]byte{
		"hairpin4":     append(be0.AsSlice(), be0.AsSlice()...),
		"cluster-ips4": vip4.AsSlice(),
	} {
		set, err := c.GetSetByName(table, name)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.SetDeleteElements(set, []nftables.SetElement{{Key: key}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Flush(); err != nil {
		t.Fatalf("delete nftables elements: %v", err)
	}
	fwState := func() ipvs.FirewallState {
		t.Helper()
		st, err := ipvs.NewNFTables().Load()
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	damaged := fwState()
	if slices.Contains(damaged.Content.Endpoints, be0) || slices.Contains(damaged.Content.ClusterIPs, vip4) {
		t.Fatalf("the elements are still there: %+v", damaged.Content)
	}

	// The full resync repairs all of them.
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatalf("full resync: %v", err)
	}
	gotTable, gotAddrs := kernelDump(t)
	if diff := cmp.Diff(wantTable, gotTable, cmpLab); diff != "" {
		t.Errorf("IPVS after the full resync (-before +after):\n%s", diff)
	}
	slices.SortFunc(wantAddrs, netip.Addr.Compare)
	slices.SortFunc(gotAddrs, netip.Addr.Compare)
	if diff := cmp.Diff(wantAddrs, gotAddrs, cmpLab); diff != "" {
		t.Errorf("%s after the full resync (-before +after):\n%s", DummyName, diff)
	}
	repaired := fwState()
	if !slices.Contains(repaired.Content.Endpoints, be0) || !slices.Contains(repaired.Content.ClusterIPs, vip4) {
		t.Errorf("nftables after the full resync: %+v, want %s among the endpoints and %s among the ClusterIPs", repaired.Content, be0, vip4)
	}
	if name, _, err := Source(t.Context(), topo.Client, netip.AddrPortFrom(vip6, 80)); err != nil || (name != "be1" && name != "be3") {
		t.Errorf("IPv6 Service after the repair: %s, %v; want be1 or be3", name, err)
	}
}

func dests(ds []ipvs.DestinationState) []ipvs.Destination {
	out := []ipvs.Destination{}
	for _, d := range ds {
		out = append(out, d.Destination)
	}
	return out
}

// internal is vs with in as its in-cluster destinations (the plan's
// Internal set: a firewall-mark service).
func internal(vs model.VirtualService, in []model.Destination) model.VirtualService {
	vs.Internal = in
	return vs
}

// deleteMarkServices deletes every firewall-mark virtual service.
func deleteMarkServices(t *testing.T) {
	t.Helper()
	k, err := ipvs.NewNetlink()
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	svcs, err := k.Services()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range svcs {
		if _, mark := ipvs.MarkOf(s.VirtualServiceKey); mark {
			if err := k.DeleteService(s.VirtualServiceKey); err != nil {
				t.Fatal(err)
			}
		}
	}
}
