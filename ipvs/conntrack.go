package ipvs

import "net/netip"

// Conntrack deletes connection-tracking entries. IPVS with
// net.ipv4.vs.conntrack=1 keeps a conntrack entry per flow; a UDP flow
// whose entry outlives its backend keeps going to it (kube-proxy's stale
// UDP conntrack), so the dataplane deletes them when it removes a UDP
// backend or service; and a flow sent before a UDP service had real
// servers keeps its entry without NAT, so the dataplane deletes a
// service's entries when it gets its first serving real servers
// (UDPFlushes).
type Conntrack interface {
	// DeleteUDP deletes the UDP entries that any of flows names, in one
	// pass over the table per address family: a pass reads the whole
	// table, so the dataplane gathers what an Apply or a Drain removed
	// into one call. It returns how many it deleted, also with an error
	// wrapping ErrInterrupted, when the table's dump was interrupted and
	// only some of the entries were seen.
	DeleteUDP(flows []UDPFlows) (uint, error)
}

// UDPFlows names UDP conntrack entries: those whose original destination
// is VIP:Port and, when Backend is valid, whose reply comes from Backend.
type UDPFlows struct {
	VIP     netip.Addr
	Port    uint16
	Backend netip.Addr // invalid: every backend
}
