package routers

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Peering is the BGP side of a lab router toward the nodes, from which
// FRRConf and BIRDConf write the router's configuration: the suites of
// test/peers and announcers/bgp peer with routers configured alike.
type Peering struct {
	// RouterID is the router's BGP identifier, and BIRD's local address.
	RouterID netip.Addr
	// ASN is the router's AS number, NodeASN the nodes'.
	ASN, NodeASN uint32
	// Nodes are the IPv4 neighbours, Nodes6 the IPv6 ones (FRR only).
	Nodes, Nodes6 []netip.Addr
	// Keepalive and Hold are the BGP timers, in seconds.
	Keepalive, Hold int
	// BFD turns on BFD for the IPv4 neighbours (FRR's bfdd must run:
	// StartFRRWithBFD), at 300 ms x 3 in BIRD.
	BFD bool
	// BFDGraceful keeps a peer's routes through a BFD Down when graceful
	// restart was negotiated with it, as through its restart: FRR's "bfd
	// check-control-plane-failure" (bgpd ignores the Down of a peer whose
	// BFD shares fate with its control plane, C bit clear, and keeps its
	// routes as stale), BIRD's "bfd graceful" (a BFD Down restarts the
	// session gracefully instead of hard).
	BFDGraceful bool
	// Multipath installs ECMP routes: FRR's maximum-paths 8, BIRD's kernel
	// protocol merging paths.
	Multipath bool
	// RestartTime, when set, makes FRR a graceful restarting router too
	// (it is a helper without): "bgp graceful-restart" with this restart
	// time, its forwarding state kept across a restart of bgpd
	// (preserve-fw-state; zebra keeps bgpd's routes). In seconds.
	RestartTime int
}

// FRRConf is FRR's bgpd.conf: the nodes in peer groups NODES (IPv4) and
// NODES6 (IPv6), every route accepted, none sent.
func (p Peering) FRRConf() string {
	var b strings.Builder
	fmt.Fprintf(&b, "frr defaults traditional\nhostname rfrr\nrouter bgp %d\n bgp router-id %s\n", p.ASN, p.RouterID)
	b.WriteString(" no bgp ebgp-requires-policy\n no bgp default ipv4-unicast\n")
	if p.RestartTime > 0 {
		fmt.Fprintf(&b, " bgp graceful-restart\n bgp graceful-restart restart-time %d\n bgp graceful-restart preserve-fw-state\n", p.RestartTime)
	}
	group := func(name string, nodes []netip.Addr, bfd bool) {
		fmt.Fprintf(&b, " neighbor %s peer-group\n neighbor %[1]s remote-as %d\n", name, p.NodeASN)
		fmt.Fprintf(&b, " neighbor %s timers %d %d\n neighbor %[1]s timers connect 1\n", name, p.Keepalive, p.Hold)
		if bfd {
			fmt.Fprintf(&b, " neighbor %s bfd\n", name)
			if p.BFDGraceful {
				fmt.Fprintf(&b, " neighbor %s bfd check-control-plane-failure\n", name)
			}
		}
		for _, n := range nodes {
			fmt.Fprintf(&b, " neighbor %s peer-group %s\n", n, name)
		}
	}
	family := func(afi, name string) {
		fmt.Fprintf(&b, " address-family %s unicast\n  neighbor %s activate\n", afi, name)
		if p.Multipath {
			b.WriteString("  maximum-paths 8\n")
		}
		b.WriteString(" exit-address-family\n")
	}
	group("NODES", p.Nodes, p.BFD)
	if len(p.Nodes6) > 0 {
		group("NODES6", p.Nodes6, false)
	}
	family("ipv4", "NODES")
	if len(p.Nodes6) > 0 {
		family("ipv6", "NODES6")
	}
	return b.String()
}

// BIRDConf is BIRD 2's configuration: one protocol per IPv4 node
// (node_a, node_b, ...) from template node, every route accepted and
// exported to the kernel, none sent; its error wait is 1 s instead of
// 60 s, so that sessions come back quickly.
func (p Peering) BIRDConf() string {
	var b strings.Builder
	fmt.Fprintf(&b, "router id %s;\nprotocol device { scan time 10; }\n", p.RouterID)
	if p.Multipath {
		b.WriteString("protocol kernel { ipv4 { import none; export all; }; merge paths on; }\n")
	} else {
		b.WriteString("protocol kernel { ipv4 { import none; export all; }; }\n")
	}
	if p.BFD {
		b.WriteString("protocol bfd { interface \"eth0\" { interval 300 ms; multiplier 3; }; }\n")
	}
	fmt.Fprintf(&b, "template bgp node {\n  local %s as %d; hold time %d; keepalive time %d; connect retry time 1;\n",
		p.RouterID, p.ASN, p.Hold, p.Keepalive)
	b.WriteString("  error wait time 1, 5;\n")
	switch {
	case p.BFD && p.BFDGraceful:
		b.WriteString("  bfd graceful;\n")
	case p.BFD:
		b.WriteString("  bfd on;\n")
	}
	b.WriteString("  ipv4 { import all; export none; };\n}\n")
	for _, n := range p.Nodes {
		fmt.Fprintf(&b, "protocol bgp %s from node { neighbor %s as %d; }\n", p.BIRDProtocol(n), n, p.NodeASN)
	}
	return b.String()
}

// BIRDProtocol is the name of BIRDConf's protocol for the IPv4 node
// (node_a for the first of Nodes, node_b for the second...), "" for none
// of Nodes: what birdc's "show protocols all NAME" takes.
func (p Peering) BIRDProtocol(node netip.Addr) string {
	i := slices.Index(p.Nodes, node)
	if i < 0 {
		return ""
	}
	return fmt.Sprintf("node_%c", 'a'+i)
}
