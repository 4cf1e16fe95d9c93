// Package dsrlab proves the dsr data path (docs/dsr.md) in the kernel
// lab, on kernel parts only: guest-only tests build, in one guest, a
// client, a router and three nodes in network namespaces, the router
// reaching a LoadBalancer IP through an ECMP route over the nodes
// (hashing each packet's addresses, protocol and ports), two pods behind
// node n1 and one behind n2; n3 serves nothing. Each node is programmed
// by hand, as the dataplane suites do: plan.DSR's plan (a Maglev table
// over n1 and n2, weighted 2:1 by their pods) through ipvs.DSR on every
// node, and each backend node's own virtual service over its pods
// (externalTrafficPolicy Local, no masquerade) through ipvs.Dataplane.
//
// Every link is dual-stack; the frontends are TCP, UDP and SCTP on the
// IPv4 VIP and TCP and UDP on the IPv6 VIP (ip6ip6).
//
// The tests count what survives an ECMP change over TCP (IPv4 over ipip
// and GUE, IPv6), UDP and SCTP (each flow must keep its pod, which must see the
// client's own address and port), which node's link carries the replies
// (nftables counters in the router: none through n3), how many flows each
// node forwarded, what MSS the client gets, and, with sloppy_tcp off, that
// the flows a change moves to a node that does not know them break. They
// also check fragmented UDP and the UDP limit with DF set (udp_test.go),
// ICMP errors about replies reaching the flow's pod through a node that
// never saw the flow (icmp_test.go), a backend node dying (dies_test.go)
// and `switchyard --cleanup` removing the dsr side (cleanup_test.go). Each
// can fail. mh_test.go checks how ip_vs_mh's choices depend on the order
// of its real servers. The guest needs the ipip, fou, nft_hash,
// ip6_tunnel and sctp modules (`make test-lab-dsr`).
package dsrlab
