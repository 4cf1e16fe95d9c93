// Package dsrlab proves the dsr data path (docs/dsr.md) in the kernel
// lab, on kernel parts only: guest-only tests build, in one guest, a
// client, a router and three nodes in network namespaces, the router
// reaching a LoadBalancer IP through an ECMP route over the nodes
// (hashing each packet's addresses, protocol and ports), and two pods
// behind node n1, the only node serving the address. Each node is
// programmed by hand, as the dataplane suites do: plan.DSR's plan through
// ipvs.DSR on every node, and n1's own virtual service over its pods
// (externalTrafficPolicy Local, no masquerade) through ipvs.Dataplane.
//
// The tests count what survives an ECMP change, what the pods see as the
// client's address, which node's link carries the replies (nftables
// counters in the router), what MSS the client gets, and, with
// sloppy_tcp off, that the flows a change moves to a node that does not
// know them break: the tests can fail. The guest needs the ipip, fou and
// nft_hash modules (`make test-lab-dsr`).
package dsrlab
