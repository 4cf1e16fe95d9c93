package arp

import (
	"errors"
	"fmt"
	"net"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/packet"
)

// NewARPConn returns an ARP client (mdlayher/arp) for ifi over frames,
// a connection carrying whole Ethernet frames, that sees only the frames
// decodeARP accepts. mdlayher/arp's Client.Read fails on a frame it
// cannot decode (too short, addresses of other lengths than Ethernet's
// and IPv4's) with an error the announcer cannot tell from a failed
// socket: it would back off, stop answering and report itself unhealthy
// because of one bad frame from the wire. Here such a frame is skipped.
func NewARPConn(ifi *net.Interface, frames net.PacketConn) (ARPConn, error) {
	c, err := arp.New(ifi, arpFrames{frames})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// dialARP opens an ARP socket on ifi, as arp.Dial does, through
// NewARPConn.
func dialARP(ifi *net.Interface) (ARPConn, error) {
	p, err := packet.Listen(ifi, packet.Raw, int(ethernet.EtherTypeARP), nil)
	if err != nil {
		return nil, err
	}
	c, err := NewARPConn(ifi, p)
	if err != nil {
		_ = p.Close()
		return nil, err
	}
	return c, nil
}

// arpFrames passes on the frames decodeARP accepts and skips the others.
type arpFrames struct{ net.PacketConn }

func (c arpFrames) ReadFrom(b []byte) (int, net.Addr, error) {
	for {
		n, addr, err := c.PacketConn.ReadFrom(b)
		if err != nil {
			return n, addr, err
		}
		if _, _, err := decodeARP(b[:n]); err == nil {
			return n, addr, nil
		}
	}
}

// Errors of decodeARP besides the decoders' own.
var (
	errNotARP      = errors.New("not an ARP frame")
	errNotEthernet = errors.New("not IPv4 over Ethernet")
)

// decodeARP decodes an Ethernet frame carrying an ARP packet for IPv4
// over Ethernet (hardware type 1, protocol type 0x0800, 6-byte hardware
// and 4-byte protocol addresses), the only kind the announcer answers.
// It fails on anything else.
func decodeARP(b []byte) (*arp.Packet, *ethernet.Frame, error) {
	var f ethernet.Frame
	if err := f.UnmarshalBinary(b); err != nil {
		return nil, nil, fmt.Errorf("decoding Ethernet frame: %w", err)
	}
	if f.EtherType != ethernet.EtherTypeARP {
		return nil, nil, errNotARP
	}
	var p arp.Packet
	if err := p.UnmarshalBinary(f.Payload); err != nil {
		return nil, nil, fmt.Errorf("decoding ARP packet: %w", err)
	}
	if p.HardwareType != 1 || p.ProtocolType != uint16(ethernet.EtherTypeIPv4) ||
		p.HardwareAddrLength != 6 || p.IPLength != 4 {
		return nil, nil, errNotEthernet
	}
	return &p, &f, nil
}
