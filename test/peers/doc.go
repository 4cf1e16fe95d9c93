// Package peers holds the suites that run Switchyard's announcers against
// real, independently written peers in network namespaces: the Linux
// kernel's neighbour tables and arping for the layer-2 announcer here,
// FRR and BIRD for BGP. The tests are built with the tag "peers", are
// named TestPeers*, need root, and run with `make test-peers`
// (peers.mk installs the peer software with apt when it is missing).
package peers
