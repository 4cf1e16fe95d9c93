package routers

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The configurations the peer suites wrote out by hand before Peering,
// which it must write alike, and those of its graceful restart knobs.
func TestPeeringConf(t *testing.T) {
	addrs := func(s ...string) []netip.Addr {
		var out []netip.Addr
		for _, a := range s {
			out = append(out, netip.MustParseAddr(a))
		}
		return out
	}
	frr := Peering{RouterID: netip.MustParseAddr("10.0.0.1"), ASN: 64513, NodeASN: 64512, Keepalive: 1, Hold: 3, Multipath: true,
		Nodes: addrs("10.0.0.11", "10.0.0.12"), Nodes6: addrs("fd00::11", "fd00::12")}
	frrOneNode6 := frr
	frrOneNode6.Nodes6 = addrs("fd00::11")
	frrBFD := Peering{RouterID: netip.MustParseAddr("10.0.0.1"), ASN: 64513, NodeASN: 64512, Keepalive: 3, Hold: 9, BFD: true,
		Nodes: addrs("10.0.0.11")}
	bird := Peering{RouterID: netip.MustParseAddr("10.0.0.2"), ASN: 64514, NodeASN: 64512, Keepalive: 1, Hold: 3, Multipath: true,
		Nodes: addrs("10.0.0.11", "10.0.0.12")}
	birdBFD := Peering{RouterID: netip.MustParseAddr("10.0.0.2"), ASN: 64514, NodeASN: 64512, Keepalive: 3, Hold: 9, BFD: true,
		Nodes: addrs("10.0.0.11")}
	const frrWant = `frr defaults traditional
hostname rfrr
router bgp 64513
 bgp router-id 10.0.0.1
 no bgp ebgp-requires-policy
 no bgp default ipv4-unicast
 neighbor NODES peer-group
 neighbor NODES remote-as 64512
 neighbor NODES timers 1 3
 neighbor NODES timers connect 1
 neighbor 10.0.0.11 peer-group NODES
 neighbor 10.0.0.12 peer-group NODES
 neighbor NODES6 peer-group
 neighbor NODES6 remote-as 64512
 neighbor NODES6 timers 1 3
 neighbor NODES6 timers connect 1
 neighbor fd00::11 peer-group NODES6
 neighbor fd00::12 peer-group NODES6
 address-family ipv4 unicast
  neighbor NODES activate
  maximum-paths 8
 exit-address-family
 address-family ipv6 unicast
  neighbor NODES6 activate
  maximum-paths 8
 exit-address-family
`
	const frrBFDWant = `frr defaults traditional
hostname rfrr
router bgp 64513
 bgp router-id 10.0.0.1
 no bgp ebgp-requires-policy
 no bgp default ipv4-unicast
 neighbor NODES peer-group
 neighbor NODES remote-as 64512
 neighbor NODES timers 3 9
 neighbor NODES timers connect 1
 neighbor NODES bfd
 neighbor 10.0.0.11 peer-group NODES
 address-family ipv4 unicast
  neighbor NODES activate
 exit-address-family
`
	const birdBFDWant = `router id 10.0.0.2;
protocol device { scan time 10; }
protocol kernel { ipv4 { import none; export all; }; }
protocol bfd { interface "eth0" { interval 300 ms; multiplier 3; }; }
template bgp node {
  local 10.0.0.2 as 64514; hold time 9; keepalive time 3; connect retry time 1;
  error wait time 1, 5;
  bfd on;
  ipv4 { import all; export none; };
}
protocol bgp node_a from node { neighbor 10.0.0.11 as 64512; }
`
	frrGR := frrBFD
	frrGR.BFDGraceful, frrGR.RestartTime = true, 30
	birdGR := birdBFD
	birdGR.BFDGraceful = true
	for _, tt := range []struct {
		name      string
		got, want string
	}{
		{"FRR, two dual-stack nodes, ECMP", frr.FRRConf(), frrWant},
		{"FRR, two IPv4 nodes and one IPv6", frrOneNode6.FRRConf(), strings.Replace(frrWant, " neighbor fd00::12 peer-group NODES6\n", "", 1)},
		{"FRR with BFD, one node", frrBFD.FRRConf(), frrBFDWant},
		{"BIRD, two nodes, ECMP", bird.BIRDConf(), `router id 10.0.0.2;
protocol device { scan time 10; }
protocol kernel { ipv4 { import none; export all; }; merge paths on; }
template bgp node {
  local 10.0.0.2 as 64514; hold time 3; keepalive time 1; connect retry time 1;
  error wait time 1, 5;
  ipv4 { import all; export none; };
}
protocol bgp node_a from node { neighbor 10.0.0.11 as 64512; }
protocol bgp node_b from node { neighbor 10.0.0.12 as 64512; }
`},
		{"BIRD with BFD, one node", birdBFD.BIRDConf(), birdBFDWant},
		// The graceful restart knobs: the BFD configurations above and
		// their lines.
		{"FRR with BFD kept through graceful restart, restarting gracefully itself", frrGR.FRRConf(), strings.NewReplacer(
			" no bgp default ipv4-unicast\n", " no bgp default ipv4-unicast\n bgp graceful-restart\n bgp graceful-restart restart-time 30\n bgp graceful-restart preserve-fw-state\n",
			" neighbor NODES bfd\n", " neighbor NODES bfd\n neighbor NODES bfd check-control-plane-failure\n").Replace(frrBFDWant)},
		{"BIRD with BFD kept through graceful restart", birdGR.BIRDConf(), strings.Replace(birdBFDWant, "  bfd on;\n", "  bfd graceful;\n", 1)},
	} {
		if diff := cmp.Diff(tt.want, tt.got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
	}
	for node, want := range map[string]string{"10.0.0.11": "node_a", "10.0.0.12": "node_b", "10.0.0.13": ""} {
		if got := bird.BIRDProtocol(netip.MustParseAddr(node)); got != want {
			t.Errorf("BIRDProtocol(%s) = %q, want %q", node, got, want)
		}
	}
}
