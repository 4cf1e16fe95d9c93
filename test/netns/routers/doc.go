// Package routers runs real BGP routers for the peer tests, each in a
// network namespace (test/netns): FRR (zebra and bgpd) and BIRD 2, from
// Debian's packages, with their state in a directory of their own.
// Peering writes their configurations toward the nodes (FRRConf,
// BIRDConf) for the suites that peer alike (test/peers, announcers/bgp);
// this package starts them, waits until they answer, gives their control
// commands, restarts FRR's bgpd, and logs their state when the test
// fails.
package routers
