package kpbench

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// chainListing is `nft list chain` of one service chain as nft 1.0.6
// prints it, with the masquerade rule kube-proxy writes first.
const chainListing = `table ip kube-proxy {
	chain service-ULMVA6XW-kpbench/svc-00000/tcp/http {
		ip daddr 10.96.1.0 tcp dport 80 ip saddr != 10.64.0.0/11 jump mark-for-masquerade
		meta l4proto tcp dnat ip to numgen random mod 2 map { 0 : 10.64.0.1 . 8080, 1 : 10.80.0.1 . 8080 }
	}
}
`

func TestParseNft(t *testing.T) {
	listed, err := os.ReadFile("testdata/nft-list-table.txt") // nft 1.0.6, wrapped elements
	if err != nil {
		t.Fatal(err)
	}
	ap := netip.MustParseAddrPort
	// dests returns endpoints first..first+n-1 of 10.64.0.0 on 8080.
	dests := func(first, n int) []netip.AddrPort {
		var ds []netip.AddrPort
		for i := range n {
			ds = append(ds, ap(fmt.Sprintf("10.64.0.%d:8080", first+i)))
		}
		return ds
	}
	svc := func(i int) string { return fmt.Sprintf("service-AAAA000%d-kpbench/svc-0000%d/tcp/", i, i) }
	tests := []struct {
		name    string
		in      string
		want    NftTable
		wantErr string
	}{
		{name: "whole table", in: string(listed), want: NftTable{
			ServiceIPs: map[VirtualService]string{
				{Protocol: "TCP", Addr: ap("10.96.1.0:80")}: svc(0),
				{Protocol: "TCP", Addr: ap("10.96.1.1:80")}: svc(1),
				{Protocol: "TCP", Addr: ap("10.96.1.2:80")}: svc(2),
				{Protocol: "TCP", Addr: ap("10.96.1.3:80")}: svc(3),
			},
			Chains: map[string][]netip.AddrPort{
				svc(0): dests(1, 10), svc(1): dests(11, 10), svc(2): dests(21, 10), svc(3): dests(31, 10),
			},
		}},
		{name: "one chain", in: chainListing, want: NftTable{
			ServiceIPs: map[VirtualService]string{},
			Chains: map[string][]netip.AddrPort{
				"service-ULMVA6XW-kpbench/svc-00000/tcp/http": {ap("10.64.0.1:8080"), ap("10.80.0.1:8080")},
			},
		}},
		{name: "later nft: dnat ip addr . port to, one-line elements, chains without DNAT", in: `table ip kube-proxy {
	comment "rules for kube-proxy"
	set cluster-ips {
		type ipv4_addr
		elements = { 10.96.1.0,
			     10.96.1.1 }
	}
	map service-ips {
		type ipv4_addr . inet_proto . inet_service : verdict
		comment "ClusterIP, ExternalIP and LoadBalancer IP traffic"
		elements = { 10.96.1.0 . tcp . 80 : goto service-X-kpbench/svc-00000/tcp/http }
	}
	map no-endpoint-services {
		type ipv4_addr . inet_proto . inet_service : verdict
		elements = { 10.96.9.9 . tcp . 80 comment "kpbench/empty:http" : goto reject-chain }
	}
	chain services {
		ip daddr . meta l4proto . th dport vmap @service-ips
	}
	chain service-X-kpbench/svc-00000/tcp/http {
		meta l4proto tcp dnat ip addr . port to numgen random mod 1 map { 0 : 10.64.0.1 . 8080 }
	}
}
`, want: NftTable{
			ServiceIPs: map[VirtualService]string{{Protocol: "TCP", Addr: ap("10.96.1.0:80")}: "service-X-kpbench/svc-00000/tcp/http"},
			Chains: map[string][]netip.AddrPort{
				"services": nil, "service-X-kpbench/svc-00000/tcp/http": {ap("10.64.0.1:8080")},
			},
		}},
		{name: "empty table", in: "table ip kube-proxy {\n}\n", want: NftTable{
			ServiceIPs: map[VirtualService]string{}, Chains: map[string][]netip.AddrPort{},
		}},
		{name: "bad service-ips element", in: "table ip kube-proxy {\n\tmap service-ips {\n\t\telements = { 10.96.1.0 . tcp : goto x }\n\t}\n}\n",
			wantErr: "service-ips element"},
		{name: "bad endpoint address", in: "table ip kube-proxy {\n\tchain c {\n\t\tdnat ip to numgen random mod 1 map { 0 : 10.64.0 . 8080 }\n\t}\n}\n",
			wantErr: "numgen map element"},
		{name: "output cut inside the elements", in: "table ip kube-proxy {\n\tmap service-ips {\n\t\telements = { 10.96.1.0 . tcp . 80 : goto a,\n",
			wantErr: "ends inside"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseNft(strings.NewReader(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseNft error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateComparable(netip.AddrPort{})); diff != "" {
				t.Errorf("ParseNft (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMissingNft(t *testing.T) {
	w, err := NewWorkload(2, 2)
	if err != nil {
		t.Fatal(err)
	}
	ap := netip.MustParseAddrPort
	vs := func(s string) VirtualService { return VirtualService{Protocol: "TCP", Addr: ap(s)} }
	tests := []struct {
		name  string
		table NftTable
		want  int
	}{
		{name: "empty", table: NftTable{}, want: 4},
		{name: "one service complete, one missing an endpoint", table: NftTable{
			ServiceIPs: map[VirtualService]string{vs("10.96.1.0:80"): "a", vs("10.96.1.1:80"): "b"},
			Chains: map[string][]netip.AddrPort{
				"a": {ap("10.64.0.1:8080"), ap("10.64.0.2:8080")}, "b": {ap("10.64.0.3:8080"), ap("10.64.0.9:8080")},
			},
		}, want: 1},
		{name: "a chain not listed, a wrong port", table: NftTable{
			ServiceIPs: map[VirtualService]string{vs("10.96.1.0:80"): "a", vs("10.96.1.1:80"): "b"},
			Chains:     map[string][]netip.AddrPort{"b": {ap("10.64.0.3:80"), ap("10.64.0.4:8080")}},
		}, want: 3},
		{name: "no service-ips element: the chain does not count", table: NftTable{
			ServiceIPs: map[VirtualService]string{vs("10.96.1.0:80"): "a"},
			Chains: map[string][]netip.AddrPort{
				"a": {ap("10.64.0.1:8080"), ap("10.64.0.2:8080")}, "b": {ap("10.64.0.3:8080"), ap("10.64.0.4:8080")},
			},
		}, want: 2},
		{name: "complete, extra services ignored", table: NftTable{
			ServiceIPs: map[VirtualService]string{vs("10.96.1.0:80"): "a", vs("10.96.1.1:80"): "b", vs("10.96.0.1:443"): "k"},
			Chains: map[string][]netip.AddrPort{
				"a": {ap("10.64.0.1:8080"), ap("10.64.0.2:8080")}, "b": {ap("10.64.0.4:8080"), ap("10.64.0.3:8080")},
				"k": {ap("10.0.2.2:6443")},
			},
		}, want: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := w.MissingNft(tc.table); got != tc.want {
				t.Errorf("MissingNft = %d, want %d", got, tc.want)
			}
		})
	}
}
