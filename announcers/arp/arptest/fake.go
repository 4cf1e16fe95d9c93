package arptest

import (
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/mdlayher/ndp"
	"golang.org/x/net/ipv6"
)

// PacketConn is an in-memory net.PacketConn carrying whole frames. Frames
// given to Inject are read by ReadFrom; frames written are delivered on
// Written.
type PacketConn struct {
	in      chan []byte
	inErr   chan error
	out     chan []byte
	done    chan struct{}
	once    sync.Once
	mu      sync.Mutex
	failErr error
}

var _ net.PacketConn = (*PacketConn)(nil)

// NewPacketConn returns an open PacketConn.
func NewPacketConn() *PacketConn {
	return &PacketConn{in: make(chan []byte), inErr: make(chan error), out: make(chan []byte, 256), done: make(chan struct{})}
}

// Inject hands frame to the next ReadFrom. It blocks until then and
// reports false if the conn was closed first.
func (c *PacketConn) Inject(frame []byte) bool {
	select {
	case c.in <- slices.Clone(frame):
		return true
	case <-c.done:
		return false
	}
}

// InjectReadError makes the next ReadFrom fail with err. It blocks until
// then and reports false if the conn was closed first.
func (c *PacketConn) InjectReadError(err error) bool {
	select {
	case c.inErr <- err:
		return true
	case <-c.done:
		return false
	}
}

// Written delivers every frame written, in order.
func (c *PacketConn) Written() <-chan []byte { return c.out }

// FailWrites makes later writes fail with err; nil restores them.
func (c *PacketConn) FailWrites(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failErr = err
}

// ReadFrom implements net.PacketConn.
func (c *PacketConn) ReadFrom(b []byte) (int, net.Addr, error) {
	select {
	case f := <-c.in:
		return copy(b, f), nil, nil
	case err := <-c.inErr:
		return 0, nil, err
	case <-c.done:
		return 0, nil, net.ErrClosed
	}
}

// WriteTo implements net.PacketConn.
func (c *PacketConn) WriteTo(b []byte, _ net.Addr) (int, error) {
	c.mu.Lock()
	err := c.failErr
	c.mu.Unlock()
	if err != nil {
		return 0, err
	}
	select {
	case c.out <- slices.Clone(b):
		return len(b), nil
	case <-c.done:
		return 0, net.ErrClosed
	}
}

// Close implements net.PacketConn.
func (c *PacketConn) Close() error {
	c.once.Do(func() { close(c.done) })
	return nil
}

// Closed reports whether Close was called.
func (c *PacketConn) Closed() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// LocalAddr implements net.PacketConn.
func (c *PacketConn) LocalAddr() net.Addr { return nil }

// SetDeadline implements net.PacketConn; deadlines are ignored.
func (c *PacketConn) SetDeadline(time.Time) error { return nil }

// SetReadDeadline implements net.PacketConn; deadlines are ignored.
func (c *PacketConn) SetReadDeadline(time.Time) error { return nil }

// SetWriteDeadline implements net.PacketConn; deadlines are ignored.
func (c *PacketConn) SetWriteDeadline(time.Time) error { return nil }

// NDPMessage is one NDP message read or written through NDPConn.
type NDPMessage struct {
	Msg     ndp.Message
	IfIndex int
	// Src is the source address given in the control message (written)
	// or the sender (read).
	Src netip.Addr
	Dst netip.Addr
}

// NDPConn is an in-memory NDP connection with the method set of
// *ndp.Conn that the announcer uses.
type NDPConn struct {
	in       chan NDPMessage
	out      chan NDPMessage
	done     chan struct{}
	once     sync.Once
	mu       sync.Mutex
	groups   map[netip.Addr]bool
	joinFail error
}

// NewNDPConn returns an open NDPConn.
func NewNDPConn() *NDPConn {
	return &NDPConn{
		in:     make(chan NDPMessage),
		out:    make(chan NDPMessage, 256),
		done:   make(chan struct{}),
		groups: make(map[netip.Addr]bool),
	}
}

// Inject hands m to the next ReadFrom; false if closed first.
func (c *NDPConn) Inject(m NDPMessage) bool {
	select {
	case c.in <- m:
		return true
	case <-c.done:
		return false
	}
}

// Written delivers every message written, in order.
func (c *NDPConn) Written() <-chan NDPMessage { return c.out }

// Groups returns the multicast groups joined, in ascending order.
func (c *NDPConn) Groups() []netip.Addr {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]netip.Addr, 0, len(c.groups))
	for g := range c.groups {
		out = append(out, g)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// ReadFrom returns the next injected message.
func (c *NDPConn) ReadFrom() (ndp.Message, *ipv6.ControlMessage, netip.Addr, error) {
	select {
	case m := <-c.in:
		return m.Msg, &ipv6.ControlMessage{IfIndex: m.IfIndex, HopLimit: ndp.HopLimit}, m.Src, nil
	case <-c.done:
		return nil, nil, netip.Addr{}, net.ErrClosed
	}
}

// WriteTo records m after checking that it marshals.
func (c *NDPConn) WriteTo(m ndp.Message, cm *ipv6.ControlMessage, dst netip.Addr) error {
	if _, err := ndp.MarshalMessage(m); err != nil {
		return err
	}
	w := NDPMessage{Msg: m, Dst: dst}
	if cm != nil {
		w.IfIndex = cm.IfIndex
		if src, ok := netip.AddrFromSlice(cm.Src); ok {
			w.Src = src
		}
	}
	select {
	case c.out <- w:
		return nil
	case <-c.done:
		return net.ErrClosed
	}
}

// FailJoins makes later JoinGroup calls fail with err; nil restores them.
func (c *NDPConn) FailJoins(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.joinFail = err
}

// JoinGroup records group.
func (c *NDPConn) JoinGroup(group netip.Addr) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.joinFail != nil {
		return c.joinFail
	}
	c.groups[group] = true
	return nil
}

// LeaveGroup forgets group.
func (c *NDPConn) LeaveGroup(group netip.Addr) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.groups, group)
	return nil
}

// Close makes reads and writes fail with net.ErrClosed.
func (c *NDPConn) Close() error {
	c.once.Do(func() { close(c.done) })
	return nil
}

// Closed reports whether Close was called.
func (c *NDPConn) Closed() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}
