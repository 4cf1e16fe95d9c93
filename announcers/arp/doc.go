// Package arp is the layer-2 announcer: it makes LoadBalancer addresses
// owned by this node reachable on the local segment. For IPv4 it answers
// ARP requests for owned addresses (mdlayher/arp) and sends gratuitous ARP,
// a request and a reply, when an address is gained; for IPv6 it answers
// neighbour solicitations and sends unsolicited, overriding neighbour
// advertisements (mdlayher/ndp).
//
// It owns the packet sockets it opens on the configured interfaces and
// nothing else: addresses are bound to a local interface by the dataplane,
// and deciding which node owns an address is the election's job. Nodes
// that hold the address on lo should set arp_ignore=1 and arp_announce=2
// so the kernel itself does not answer for it.
package arp
