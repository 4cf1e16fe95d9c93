// Package bfdtest provides an in-memory network for tests of bfd.Server:
// each Endpoint is a bfd.Transport at one address, packets sent to an
// address reach its Endpoint, and a test can drop packets between two
// addresses or inject its own datagrams. Goroutine-safe.
package bfdtest

import (
	"errors"
	"net/netip"
	"sync"

	"github.com/switchyard-lb/switchyard/announcers/bgp/bfd"
)

// Network connects Endpoints.
type Network struct {
	mu        sync.Mutex
	endpoints map[netip.Addr]*Endpoint
	blocked   map[[2]netip.Addr]bool
	ttl       uint8
	nextPort  uint16
}

// NewNetwork returns an empty network that delivers with TTL 255.
func NewNetwork() *Network {
	return &Network{endpoints: map[netip.Addr]*Endpoint{}, blocked: map[[2]netip.Addr]bool{}, ttl: bfd.TTL, nextPort: bfd.MinSourcePort}
}

// SetTTL sets the TTL the network delivers with (a router in between
// decrements it).
func (n *Network) SetTTL(ttl uint8) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.ttl = ttl
}

// Block drops (or, with block false, delivers again) packets from src to
// dst.
func (n *Network) Block(src, dst netip.Addr, block bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if block {
		n.blocked[[2]netip.Addr{src, dst}] = true
	} else {
		delete(n.blocked, [2]netip.Addr{src, dst})
	}
}

// Endpoint returns a transport at addr.
func (n *Network) Endpoint(addr netip.Addr) *Endpoint {
	n.mu.Lock()
	defer n.mu.Unlock()
	e := &Endpoint{net: n, addr: addr, in: make(chan bfd.Datagram, 256), done: make(chan struct{})}
	n.endpoints[addr] = e
	return e
}

// Endpoint is one address's bfd.Transport.
type Endpoint struct {
	net  *Network
	addr netip.Addr
	in   chan bfd.Datagram
	done chan struct{}
	once sync.Once

	mu   sync.Mutex
	sent []Sent
}

var _ bfd.Transport = (*Endpoint)(nil)

// Sent is a packet an Endpoint sent.
type Sent struct {
	To       netip.Addr
	Multihop bool
	SrcPort  uint16
	Payload  []byte
}

// ErrClosed is returned by a closed Endpoint.
var ErrClosed = errors.New("bfdtest: endpoint closed")

// Receive returns the next datagram delivered to the endpoint.
func (e *Endpoint) Receive() (bfd.Datagram, error) {
	select {
	case d := <-e.in:
		return d, nil
	case <-e.done:
		return bfd.Datagram{}, ErrClosed
	}
}

// Inject delivers d to the endpoint as if received.
func (e *Endpoint) Inject(d bfd.Datagram) {
	select {
	case e.in <- d:
	case <-e.done:
	}
}

// Open returns a sender to peer from the next source port.
func (e *Endpoint) Open(peer netip.Addr, multihop bool) (bfd.Sender, error) {
	n := e.net
	n.mu.Lock()
	port := n.nextPort
	n.nextPort++
	n.mu.Unlock()
	return &sender{e: e, to: peer, multihop: multihop, port: port}, nil
}

// Sent returns the packets the endpoint sent, oldest first.
func (e *Endpoint) Sent() []Sent {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Sent(nil), e.sent...)
}

// Close ends Receive.
func (e *Endpoint) Close() error {
	e.once.Do(func() { close(e.done) })
	return nil
}

type sender struct {
	e        *Endpoint
	to       netip.Addr
	multihop bool
	port     uint16
	closed   bool
}

func (s *sender) Send(b []byte) error {
	e, n := s.e, s.e.net
	e.mu.Lock()
	if s.closed {
		e.mu.Unlock()
		return ErrClosed
	}
	e.sent = append(e.sent, Sent{To: s.to, Multihop: s.multihop, SrcPort: s.port, Payload: append([]byte(nil), b...)})
	e.mu.Unlock()
	n.mu.Lock()
	dst := n.endpoints[s.to]
	blocked := n.blocked[[2]netip.Addr{e.addr, s.to}]
	ttl := n.ttl
	n.mu.Unlock()
	if dst == nil || blocked {
		return nil // lost on the wire, as UDP
	}
	d := bfd.Datagram{Payload: append([]byte(nil), b...), Src: netip.AddrPortFrom(e.addr, s.port), TTL: ttl, Multihop: s.multihop}
	select {
	case dst.in <- d:
	case <-dst.done:
	default: // receiver's queue full: dropped
	}
	return nil
}

func (s *sender) Close() error {
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	s.closed = true
	return nil
}
