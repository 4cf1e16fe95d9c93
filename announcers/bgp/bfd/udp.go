package bfd

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"syscall"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// UDPTransport is the Transport over the host's UDP sockets: it listens
// on PortSingleHop and, when asked, PortMultihop, over IPv4 and IPv6,
// reading each datagram's TTL; each session sends from its own socket.
// It needs no privilege.
type UDPTransport struct {
	conns []*ttlConn
	in    chan Datagram
	done  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup
}

var _ Transport = (*UDPTransport)(nil)

// ListenUDP opens the receiving sockets on every local address, IPv4 and
// IPv6 (a family the host does not have is skipped), on PortSingleHop
// and, with multihop, PortMultihop.
func ListenUDP(multihop bool) (*UDPTransport, error) {
	t := &UDPTransport{in: make(chan Datagram, 64), done: make(chan struct{})}
	ports := []int{PortSingleHop}
	if multihop {
		ports = append(ports, PortMultihop)
	}
	var errs []error
	for _, port := range ports {
		for _, network := range []string{"udp4", "udp6"} {
			c, err := listenTTL(network, port)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			t.conns = append(t.conns, c)
			t.wg.Add(1)
			go t.read(c, port == PortMultihop)
		}
	}
	if len(t.conns) == 0 || (len(errs) > 0 && !allAFNotSupported(errs)) {
		t.Close()
		return nil, fmt.Errorf("bfd: listening: %w", errors.Join(errs...))
	}
	return t, nil
}

func allAFNotSupported(errs []error) bool {
	for _, err := range errs {
		if !errors.Is(err, syscall.EAFNOSUPPORT) && !errors.Is(err, syscall.EADDRNOTAVAIL) {
			return false
		}
	}
	return true
}

// ttlConn is a listening socket that reports received TTLs. The x/net
// PacketConn that enabled the control messages must be the one that
// reads: it sizes the buffer for them.
type ttlConn struct {
	c  net.PacketConn
	p4 *ipv4.PacketConn // IPv4 socket
	p6 *ipv6.PacketConn // IPv6 socket
}

// listenTTL opens a UDP socket on port that reports received TTLs.
func listenTTL(network string, port int) (*ttlConn, error) {
	addr := "0.0.0.0"
	if network == "udp6" {
		addr = "::"
	}
	c, err := net.ListenPacket(network, net.JoinHostPort(addr, fmt.Sprint(port)))
	if err != nil {
		return nil, err
	}
	tc := &ttlConn{c: c}
	if network == "udp4" {
		tc.p4 = ipv4.NewPacketConn(c)
		err = tc.p4.SetControlMessage(ipv4.FlagTTL, true)
	} else {
		tc.p6 = ipv6.NewPacketConn(c)
		err = tc.p6.SetControlMessage(ipv6.FlagHopLimit, true)
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("%s port %d: receiving TTL: %w", network, port, err)
	}
	return tc, nil
}

func (t *UDPTransport) read(c *ttlConn, multihop bool) {
	defer t.wg.Done()
	buf := make([]byte, 1500)
	for {
		var n, ttl int
		var src net.Addr
		var err error
		if c.p4 != nil {
			var cm *ipv4.ControlMessage
			n, cm, src, err = c.p4.ReadFrom(buf)
			if cm != nil {
				ttl = cm.TTL
			}
		} else {
			var cm *ipv6.ControlMessage
			n, cm, src, err = c.p6.ReadFrom(buf)
			if cm != nil {
				ttl = cm.HopLimit
			}
		}
		if err != nil {
			select {
			case <-t.done:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		ua, ok := src.(*net.UDPAddr)
		if !ok {
			continue
		}
		d := Datagram{Payload: append([]byte(nil), buf[:n]...), Src: ua.AddrPort(), TTL: uint8(min(max(ttl, 0), 255)), Multihop: multihop}
		select {
		case t.in <- d:
		case <-t.done:
			return
		}
	}
}

// Receive returns the next datagram.
func (t *UDPTransport) Receive() (Datagram, error) {
	select {
	case d := <-t.in:
		return d, nil
	case <-t.done:
		return Datagram{}, net.ErrClosed
	}
}

// Open returns a socket connected to peer's BFD port from a free source
// port in MinSourcePort..MaxSourcePort, sending with TTL 255.
func (t *UDPTransport) Open(peer netip.Addr, multihop bool) (Sender, error) {
	port := PortSingleHop
	if multihop {
		port = PortMultihop
	}
	peer = peer.Unmap()
	network := "udp4"
	if peer.Is6() {
		network = "udp6"
	}
	raddr := net.UDPAddrFromAddrPort(netip.AddrPortFrom(peer, uint16(port)))
	var lastErr error
	const span = MaxSourcePort - MinSourcePort + 1
	start := rand.IntN(span)
	for i := range 64 {
		lport := MinSourcePort + (start+i*7919)%span
		c, err := net.DialUDP(network, &net.UDPAddr{Port: lport}, raddr)
		if errors.Is(err, syscall.EADDRINUSE) {
			lastErr = err
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("bfd: socket to %s: %w", raddr, err)
		}
		if peer.Is4() {
			err = ipv4.NewConn(c).SetTTL(TTL)
		} else {
			err = ipv6.NewConn(c).SetHopLimit(TTL)
		}
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("bfd: setting TTL 255 to %s: %w", raddr, err)
		}
		return udpSender{c}, nil
	}
	return nil, fmt.Errorf("bfd: no free source port for %s: %w", raddr, lastErr)
}

type udpSender struct{ c *net.UDPConn }

func (s udpSender) Send(b []byte) error {
	_, err := s.c.Write(b)
	return err
}

func (s udpSender) Close() error { return s.c.Close() }

// Close closes the receiving sockets.
func (t *UDPTransport) Close() error {
	t.once.Do(func() {
		close(t.done)
		for _, c := range t.conns {
			c.c.Close()
		}
		t.wg.Wait()
	})
	return nil
}
