//go:build linux

package ipvs_test

import (
	"errors"
	"net/netip"
	"os"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/nftables"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/ipvs/ipvstest"
	"github.com/switchyard-lb/switchyard/test/lab"
)

// The firewall contract: Load gives back what Sync recorded, against the
// fake on any host and against nftables in the lab.

func TestFirewallContractFake(t *testing.T) {
	testFirewallContract(t, &ipvstest.FakeFirewall{})
}

func TestFirewallContractNFTables(t *testing.T) {
	if os.Getenv(lab.GuestEnv) != "1" {
		t.Skipf("guest-only: writes nftables in the kernel lab (%s=1); run `make test-lab`", lab.GuestEnv)
	}
	t.Cleanup(func() {
		c, err := nftables.New()
		if err != nil {
			t.Fatal(err)
		}
		c.DelTable(&nftables.Table{Name: ipvs.TableName, Family: nftables.TableFamilyINet})
		if err := c.Flush(); err != nil {
			t.Errorf("delete table %s: %v", ipvs.TableName, err)
		}
	})
	testFirewallContract(t, ipvs.NewNFTables())
}

func testFirewallContract(t *testing.T, fw ipvs.Firewall) {
	if got, err := fw.Load(); err != nil || got.Stamp != "" || len(got.Owned) != 0 {
		t.Fatalf("Load without a table = %+v, %v; want the zero state", got, err)
	}
	node4, node6 := netip.MustParseAddr("192.168.1.5"), netip.MustParseAddr("fd00::5")
	if err := fw.RecordOwned([]model.VirtualServiceKey{{Addr: node4, Port: 30080, Protocol: model.TCP}}, nil); !errors.Is(err, ipvs.ErrNotFound) {
		t.Errorf("RecordOwned without a table = %v, want ErrNotFound", err)
	}
	spec := ipvs.FirewallSpec{
		ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.1"), netip.MustParseAddr("fd00:96::1")},
		NodePorts:  []model.VirtualServiceKey{{Addr: node4, Port: 30080, Protocol: model.TCP}},
		Local:      ipvs.LocalDetector{CIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}},
		Endpoints:  []netip.Addr{netip.MustParseAddr("10.244.1.2"), netip.MustParseAddr("fd00:244::2")},
		// Internal marks, and the firewall-mark services among the owned
		// keys (ipvs.MarkKey).
		Internal: []ipvs.InternalMark{
			{Key: model.VirtualServiceKey{Addr: netip.MustParseAddr("198.51.100.1"), Port: 80, Protocol: model.TCP}, Mark: 1},
			{Key: model.VirtualServiceKey{Addr: netip.MustParseAddr("2001:db8::1"), Port: 53, Protocol: model.UDP}, Mark: ipvs.InternalMarkMask},
		},
		Owned: []model.VirtualServiceKey{
			ipvs.MarkKey(1, false),
			{Addr: node4, Port: 30080, Protocol: model.TCP},
			{Addr: node4, Port: 30081, Protocol: model.UDP},
			{Addr: node4, Port: 30082, Protocol: model.SCTP},
			ipvs.MarkKey(ipvs.InternalMarkMask, true),
			{Addr: node6, Port: 30080, Protocol: model.TCP},
		},
	}
	// Only the element sets differ from spec: NFTables updates in place.
	fewer := spec
	fewer.Owned = spec.Owned[1:]
	fewer.Endpoints = []netip.Addr{netip.MustParseAddr("10.244.1.3")}
	for i, s := range []ipvs.FirewallSpec{spec, {}, spec, fewer, spec} {
		if err := fw.Sync(s); err != nil {
			t.Fatalf("Sync %d: %v", i, err)
		}
		got, err := fw.Load()
		if err != nil {
			t.Fatalf("Load %d: %v", i, err)
		}
		if diff := cmp.Diff(stateOf(s, s.Owned), got, cmpAddrs); diff != "" {
			t.Errorf("Load after Sync %d (-want +got):\n%s", i, diff)
		}
	}

	// Update changes elements alone, from the stamp the table holds; a
	// stale From changes nothing.
	moved := spec
	moved.ClusterIPs = []netip.Addr{netip.MustParseAddr("10.96.0.2"), netip.MustParseAddr("fd00:96::1")}
	moved.ExternalIPs = []netip.Addr{netip.MustParseAddr("192.0.2.7")}
	moved.NodePorts = nil
	moved.Endpoints = []netip.Addr{netip.MustParseAddr("10.244.1.2"), netip.MustParseAddr("10.244.1.9")}
	moved.Internal = []ipvs.InternalMark{{Key: spec.Internal[0].Key, Mark: 2}, spec.Internal[1]}
	delta := ipvs.FirewallDelta{From: spec.Stamp(), To: moved.Stamp(),
		Add: ipvs.FirewallSpec{ClusterIPs: moved.ClusterIPs[:1], ExternalIPs: moved.ExternalIPs,
			Endpoints: moved.Endpoints[1:], Internal: moved.Internal[:1]},
		Remove: ipvs.FirewallSpec{ClusterIPs: spec.ClusterIPs[:1], NodePorts: spec.NodePorts,
			Endpoints: spec.Endpoints[1:], Internal: spec.Internal[:1]}}
	stale := delta
	stale.From = moved.Stamp()
	if err := fw.Update(stale); err == nil {
		t.Error("Update from a stamp the table does not hold succeeded")
	}
	for i, d := range []ipvs.FirewallDelta{delta, {From: moved.Stamp(), To: spec.Stamp(), Add: delta.Remove, Remove: delta.Add}} {
		if err := fw.Update(d); err != nil {
			t.Fatalf("Update %d: %v", i, err)
		}
		got, err := fw.Load()
		if err != nil {
			t.Fatal(err)
		}
		want := []ipvs.FirewallSpec{moved, spec}[i]
		if diff := cmp.Diff(stateOf(want, spec.Owned), got, cmpAddrs); diff != "" {
			t.Errorf("Load after Update %d (-want +got):\n%s", i, diff)
		}
	}

	// RecordOwned changes the owned keys alone, the stamp staying; a
	// later Sync takes them from there.
	extra := model.VirtualServiceKey{Addr: node6, Port: 30090, Protocol: model.UDP}
	for _, st := range []struct {
		name      string
		add, drop []model.VirtualServiceKey
		want      []model.VirtualServiceKey
		notFound  bool
	}{
		{name: "add one, drop one", add: []model.VirtualServiceKey{extra}, drop: spec.Owned[:1],
			want: append(slices.Clone(spec.Owned[1:]), extra)},
		{name: "add a held key", add: []model.VirtualServiceKey{extra}, want: append(slices.Clone(spec.Owned[1:]), extra)},
		{name: "drop a missing key", drop: spec.Owned[:1], notFound: true, want: append(slices.Clone(spec.Owned[1:]), extra)},
	} {
		err := fw.RecordOwned(st.add, st.drop)
		if st.notFound != errors.Is(err, ipvs.ErrNotFound) || (!st.notFound && err != nil) {
			t.Errorf("RecordOwned %s: %v, want ErrNotFound %t", st.name, err, st.notFound)
		}
		got, err := fw.Load()
		if err != nil {
			t.Fatalf("Load after RecordOwned %s: %v", st.name, err)
		}
		slices.SortFunc(st.want, model.VirtualServiceKey.Compare)
		if diff := cmp.Diff(stateOf(spec, st.want), got, cmpAddrs); diff != "" {
			t.Errorf("Load after RecordOwned %s (-want +got):\n%s", st.name, diff)
		}
	}
	for i, s := range []ipvs.FirewallSpec{fewer, spec} {
		if err := fw.Sync(s); err != nil {
			t.Fatalf("Sync %d after RecordOwned: %v", i, err)
		}
		got, err := fw.Load()
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(stateOf(s, s.Owned), got, cmpAddrs); diff != "" {
			t.Errorf("Load after Sync %d after RecordOwned (-want +got):\n%s", i, diff)
		}
	}
}

// stateOf is what Load gives back of a table programmed from s, holding
// the owned keys owned.
func stateOf(s ipvs.FirewallSpec, owned []model.VirtualServiceKey) ipvs.FirewallState {
	return ipvs.FirewallState{Stamp: s.Stamp(), Owned: owned, Internal: s.Internal,
		Content: ipvs.FirewallSpec{ClusterIPs: s.ClusterIPs, ExternalIPs: s.ExternalIPs, NodePorts: s.NodePorts, Endpoints: s.Endpoints}}
}
