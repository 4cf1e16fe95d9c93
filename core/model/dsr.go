package model

import (
	"net/netip"
	"strconv"
)

// Encapsulation is how a dsr frontend's packets travel from the node that
// received them (the ingress node) to the node that serves them.
type Encapsulation uint8

// The encapsulations (dataplane.dsr.encapsulation).
const (
	// IPIP is IP in IP (20 bytes).
	IPIP Encapsulation = iota + 1
	// GUE is Generic UDP Encapsulation over a FOU port (20+8+4 bytes),
	// for networks that carry only TCP and UDP.
	GUE
)

func (e Encapsulation) String() string {
	switch e {
	case IPIP:
		return "ipip"
	case GUE:
		return "gue"
	}
	return "Encapsulation(" + strconv.Itoa(int(e)) + ")"
}

// Overhead is the bytes the encapsulation adds to each packet.
func (e Encapsulation) Overhead() int {
	if e == GUE {
		return 20 + 8 + 4
	}
	return 20
}

// Overhead6 is the bytes the encapsulation adds to each packet between
// nodes' IPv6 addresses (ip6ip6: an IPv6 header; GUE over IPv6).
func (e Encapsulation) Overhead6() int {
	if e == GUE {
		return 40 + 8 + 4
	}
	return 40
}

// DSRPeer is another node that serves some dsr frontend: this node
// forwards the flows the frontends' tables give it, encapsulated to Addr.
// Mark is the firewall mark that selects the forwarding to it.
type DSRPeer struct {
	Name string
	Addr netip.Addr
	Mark uint32
	// Addr6, when valid, is the peer's IPv6 address, where IPv6
	// frontends' flows are encapsulated to.
	Addr6 netip.Addr
}

// DSRFrontend is a LoadBalancer or external IP frontend in dsr mode, as
// an ingress node sees it: Slots is its Maglev table, slot i holding the
// mark of the node that serves the flows hashing to i (a DSRPeer's Mark),
// or 0 where this node serves them itself, from the frontend's own
// virtual service over its local endpoints. Every node computes the same
// table, so whichever node a router picks, a flow reaches the same node.
type DSRFrontend struct {
	VirtualServiceKey
	Slots []uint32
}

// DSRPlan is what this node holds for every dsr frontend: the ingress
// side (the frontends' tables and the peers they forward to) and the
// settings the backend side needs.
type DSRPlan struct {
	// Addr is this node's address, the tunnels' local end: it is also
	// bound to the decapsulating device, as loose reverse-path filtering
	// drops every packet arriving on a device without an address.
	Addr          netip.Addr
	Encapsulation Encapsulation
	// GUEPort is the UDP port of GUE (both ends), with Encapsulation GUE.
	GUEPort uint16
	// Seed is the cluster-wide seed of the flow hash (nftables jhash),
	// which must be the same on every node.
	Seed uint32
	// MSS, when non-zero, clamps the MSS option of the SYN-ACKs this node
	// sends from a dsr frontend, so that the client's segments still fit
	// the path once encapsulated; MSS6 the same for IPv6 frontends.
	MSS  uint16
	MSS6 uint16
	// Addr6, with IPv6 frontends, is this node's IPv6 address, the local
	// end of IPv6 tunnels (decapsulated by ip6tnl0).
	Addr6 netip.Addr
	// Peers are sorted by name, Frontends by key.
	Peers     []DSRPeer
	Frontends []DSRFrontend
	// Marks is every node's peer mark in this plan, this node's included:
	// the next plan keeps them (plan.DSRInput.Marks). Nil when the caller
	// gave every node its mark (plan.DSRNode.Mark): it keeps them itself.
	Marks map[string]uint32
}
