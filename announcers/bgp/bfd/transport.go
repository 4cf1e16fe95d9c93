package bfd

import "net/netip"

// Ports of RFC 5881 (single hop) and RFC 5883 (multihop).
const (
	PortSingleHop = 3784
	PortMultihop  = 4784
	// Source ports of a session's packets (RFC 5881 §4).
	MinSourcePort = 49152
	MaxSourcePort = 65535
	// TTL is the TTL or hop limit every packet is sent with.
	TTL = 255
)

// Transport is the socket layer a Server runs on: one receiver for the
// BFD ports and one sender per session. Implementations are safe for
// concurrent use.
type Transport interface {
	// Receive blocks until a datagram arrives on a BFD port, and fails
	// once the transport is closed.
	Receive() (Datagram, error)
	// Open returns a sender of packets to peer's single-hop or multihop
	// port, from one source port in MinSourcePort..MaxSourcePort, with
	// TTL 255.
	Open(peer netip.Addr, multihop bool) (Sender, error)
	// Close ends Receive.
	Close() error
}

// Sender sends one session's packets.
type Sender interface {
	Send(b []byte) error
	Close() error
}

// Datagram is a received UDP payload.
type Datagram struct {
	Payload []byte
	Src     netip.AddrPort
	// TTL is the received TTL or hop limit; zero when unknown.
	TTL uint8
	// Multihop is set for a datagram received on PortMultihop.
	Multihop bool
}
