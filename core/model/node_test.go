package model

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestNodeIPs(t *testing.T) {
	n := &Node{Name: "n1", StatusAddresses: []NodeAddress{
		{Type: NodeHostname, Address: "n1"},
		{Type: NodeInternalIP, Address: "fd00::5"},
		{Type: NodeExternalIP, Address: "203.0.113.5"},
		{Type: NodeInternalIP, Address: "10.1.0.5"},
		{Type: NodeInternalIP, Address: "10.1.0.500"},
		{Type: NodeInternalIP, Address: "::ffff:10.1.0.6"},
		{Type: NodeInternalIP, Address: "fe80::1%eth0"},
		{Type: NodeInternalDNS, Address: "n1.cluster.internal"},
	}}
	tests := []struct {
		typ  NodeAddressType
		want []netip.Addr
	}{
		{NodeInternalIP, []netip.Addr{netip.MustParseAddr("fd00::5"), netip.MustParseAddr("10.1.0.5")}},
		{NodeExternalIP, []netip.Addr{netip.MustParseAddr("203.0.113.5")}},
		{NodeHostname, nil},
		{NodeInternalDNS, nil},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, n.IPs(tt.typ), cmpopts.EquateComparable(netip.Addr{})); diff != "" {
			t.Errorf("IPs(%s) (-want +got):\n%s", tt.typ, diff)
		}
	}
}
