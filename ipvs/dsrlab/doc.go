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
// The tests count what survives an ECMP change (each flow must keep its
// pod, which must see the client's own address and port), which node's
// link carries the replies (nftables counters in the router: none through
// n3), how many flows each node forwarded, what MSS the client gets, and,
// with sloppy_tcp off, that the flows a change moves to a node that does
// not know them break: the tests can fail. mh_test.go checks how
// ip_vs_mh's choices depend on the order of its real servers. The guest
// needs the ipip, fou and nft_hash modules (`make test-lab-dsr`).
package dsrlab
