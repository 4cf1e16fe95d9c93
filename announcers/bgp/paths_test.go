package bgp

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/model"
)

func addrSet(s ...string) map[netip.Addr]struct{} {
	m := map[netip.Addr]struct{}{}
	for _, a := range s {
		m[netip.MustParseAddr(a)] = struct{}{}
	}
	return m
}

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

func TestDiff(t *testing.T) {
	tests := []struct {
		name          string
		sent, want    map[netip.Addr]struct{}
		wantAdd, wDel []netip.Addr
	}{
		{name: "nothing to nothing", sent: addrSet(), want: addrSet()},
		{name: "unchanged", sent: addrSet("10.0.0.1", "fd00::1"), want: addrSet("fd00::1", "10.0.0.1")},
		{name: "first set", sent: addrSet(), want: addrSet("10.0.0.2", "10.0.0.1", "fd00::1"),
			wantAdd: addrs("10.0.0.1", "10.0.0.2", "fd00::1")},
		{name: "empty withdraws all", sent: addrSet("10.0.0.2", "10.0.0.1"), want: addrSet(),
			wDel: addrs("10.0.0.1", "10.0.0.2")},
		{name: "swap", sent: addrSet("10.0.0.1", "10.0.0.2"), want: addrSet("10.0.0.2", "10.0.0.3"),
			wantAdd: addrs("10.0.0.3"), wDel: addrs("10.0.0.1")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			add, del := diff(tc.sent, tc.want)
			eq := cmp.Comparer(func(a, b netip.Addr) bool { return a == b })
			if d := cmp.Diff(tc.wantAdd, add, eq); d != "" {
				t.Errorf("add (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.wDel, del, eq); d != "" {
				t.Errorf("del (-want +got):\n%s", d)
			}
		})
	}
}

func TestDesired(t *testing.T) {
	svc := model.ServiceKey{Namespace: "ns", Name: "web"}
	set := []model.Announcement{
		{Addr: netip.MustParseAddr("10.0.0.1"), Service: svc},
		{Addr: netip.MustParseAddr("::ffff:10.0.0.1"), Service: svc}, // same address, mapped
		{Addr: netip.MustParseAddr("fd00::1"), Service: svc},
		{Addr: netip.Addr{}, Service: svc},
		{Addr: netip.MustParseAddr("fe80::1%eth0"), Service: svc},
		{Addr: netip.MustParseAddr("0.0.0.0"), Service: svc},
	}
	got, err := desired(set)
	if d := cmp.Diff(addrSet("10.0.0.1", "fd00::1"), got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); d != "" {
		t.Errorf("desired (-want +got):\n%s", d)
	}
	if err == nil {
		t.Errorf("desired with three bad addresses: err = nil")
	}
}
