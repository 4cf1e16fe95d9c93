package membership

import (
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/hashicorp/memberlist"
)

// hearing is memberlist's UDP/TCP transport, noting the source of every
// packet received (probes, acks, gossip; late acks too) before memberlist
// reads it: the quorum guard's evidence that this daemon still hears a
// member, however slowly the failure detector judges it.
type hearing struct {
	*memberlist.NetTransport
	packets chan *memberlist.Packet
	stop    chan struct{}
}

// newHearing binds the transport as memberlist would (a port of 0 picks a
// free one) and forwards its packets to memberlist through heard until
// close is called.
func newHearing(mc *memberlist.Config, heard func(netip.Addr)) (*hearing, error) {
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
		BindAddrs: []string{mc.BindAddr},
		BindPort:  mc.BindPort,
		Logger:    mc.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("set up the gossip transport: %w", err)
	}
	if mc.BindPort == 0 {
		mc.BindPort = nt.GetAutoBindPort()
		if mc.AdvertisePort == 0 {
			mc.AdvertisePort = mc.BindPort
		}
	}
	h := &hearing{NetTransport: nt, packets: make(chan *memberlist.Packet), stop: make(chan struct{})}
	go func() {
		in := nt.PacketCh()
		for {
			select {
			case <-h.stop:
				return
			case p := <-in:
				if a, ok := p.From.(*net.UDPAddr); ok {
					if ip, ok := netip.AddrFromSlice(a.IP); ok {
						heard(ip.Unmap())
					}
				}
				select {
				case h.packets <- p:
				case <-h.stop:
					return
				}
			}
		}
	}()
	return h, nil
}

// PacketCh is where memberlist reads the packets, once noted.
func (h *hearing) PacketCh() <-chan *memberlist.Packet { return h.packets }

// close ends the forwarding; call it after memberlist shut down.
func (h *hearing) close() { close(h.stop) }

// heardFrom records a packet from ip: a member at that address (its
// gossip address, or one of its Node's addresses given as a peer) was
// heard from now.
func (m *Membership) heardFrom(ip netip.Addr) {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if name, ok := m.byAddr[ip]; ok {
		m.heard[name] = now
	}
}
