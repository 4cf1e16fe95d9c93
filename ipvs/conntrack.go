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
	// DeleteUDP deletes the UDP entries whose original destination is
	// vip:port and, when backend is valid, whose reply comes from backend.
	// It returns how many it deleted, also with an error wrapping
	// ErrInterrupted, when the table's dump was interrupted and only
	// some of the entries were seen.
	DeleteUDP(vip netip.Addr, port uint16, backend netip.Addr) (uint, error)
}
