package arp_test

import (
	"net"
	"net/netip"
	"testing"
	"time"

	mdarp "github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"

	"github.com/switchyard-lb/switchyard/announcers/arp"
	"github.com/switchyard-lb/switchyard/announcers/arp/arptest"
)

// sentinelMAC asks the question whose answer marks the end of the
// replies to a frame under test (the reader handles frames in order).
var sentinelMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x99}

// replyWait bounds the wait for the sentinel's answer: a frame that
// stopped the reader fails the target instead of hanging it.
const replyWait = time.Minute

// FuzzARPFrame feeds arbitrary frames from the wire to an announcer that
// owns vip4, through the path Open builds (NewARPConn over a frame conn,
// the mdlayher client, the announcer's reader). No frame may stop the
// reader or count as a read failure (the rig fails on any reported
// error), and the announcer answers at most once, only an ARP request
// for vip4, from its own MAC to the asker.
func FuzzARPFrame(f *testing.F) {
	req := frame{EthDst: "ff:ff:ff:ff:ff:ff", Op: mdarp.OperationRequest, SHA: otherMAC.String(), SIP: client4,
		THA: "00:00:00:00:00:00", TIP: vip4}
	valid := encode(f, req)
	f.Add(valid)
	f.Add(valid[:20])                // truncated ARP payload
	f.Add(valid[:ethernetHeaderLen]) // no payload at all
	odd := append([]byte(nil), valid...)
	odd[ethernetHeaderLen+5] = 16 // protocol address length 16
	f.Add(odd)
	odd2 := append([]byte(nil), valid...)
	odd2[ethernetHeaderLen+4] = 0 // hardware address length 0
	f.Add(odd2)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := newRig(t)
		announce(t, r.a, vip4)
		r.drain(t)
		r.pc.Inject(data)
		r.pc.Inject(encode(t, frame{EthDst: "ff:ff:ff:ff:ff:ff", Op: mdarp.OperationRequest, SHA: sentinelMAC.String(),
			SIP: client4, THA: "00:00:00:00:00:00", TIP: vip4}))
		var got []frame
		for {
			var b []byte
			select {
			case b = <-r.pc.Written():
			case <-time.After(replyWait):
				t.Fatalf("no answer to the sentinel within %s after frame %x", replyWait, data)
			}
			out := decode(t, b)
			if out.THA == sentinelMAC.String() {
				break
			}
			got = append(got, out)
		}
		if len(got) == 0 {
			return
		}
		if len(got) > 1 {
			t.Fatalf("frame %x got %d answers, want at most one: %+v", data, len(got), got)
		}
		in, ok := decodeRequest(data)
		if !ok {
			t.Fatalf("frame %x is no ARP request for IPv4 over Ethernet, answered %+v", data, got[0])
		}
		want := frame{EthDst: in.SHA, Op: mdarp.OperationReply, SHA: ownMAC.String(), SIP: vip4, THA: in.SHA, TIP: in.SIP}
		if in.TIP != vip4 || got[0] != want {
			t.Fatalf("request %+v answered %+v, want %+v (and only for %s)", in, got[0], want, vip4)
		}
	})
}

const ethernetHeaderLen = 14

// decodeRequest decodes b as an ARP request for IPv4 over Ethernet.
func decodeRequest(b []byte) (frame, bool) {
	var f ethernet.Frame
	if f.UnmarshalBinary(b) != nil || f.EtherType != ethernet.EtherTypeARP {
		return frame{}, false
	}
	var p mdarp.Packet
	if p.UnmarshalBinary(f.Payload) != nil || p.Operation != mdarp.OperationRequest ||
		p.HardwareAddrLength != 6 || p.IPLength != 4 {
		return frame{}, false
	}
	return frame{f.Destination.String(), p.Operation, p.SenderHardwareAddr.String(), p.SenderIP,
		p.TargetHardwareAddr.String(), p.TargetIP}, true
}

// TestMalformedARPFrameIsSkipped: frames that do not decode as ARP for
// IPv4 over Ethernet are skipped, not read failures: the announcer keeps
// answering and stays healthy (mdlayher/arp's Client.Read alone fails on
// them, and the announcer backed off and turned unhealthy).
func TestMalformedARPFrameIsSkipped(t *testing.T) {
	valid := encode(t, frame{EthDst: "ff:ff:ff:ff:ff:ff", Op: mdarp.OperationRequest, SHA: otherMAC.String(), SIP: client4,
		THA: "00:00:00:00:00:00", TIP: vip4})
	odd := append([]byte(nil), valid...)
	odd[ethernetHeaderLen+5] = 16
	for name, b := range map[string][]byte{
		"truncated ARP payload":             valid[:20],
		"Ethernet header only":              valid[:ethernetHeaderLen],
		"shorter than an Ethernet header":   valid[:6],
		"16-byte protocol addresses (IPv6)": odd,
	} {
		t.Run(name, func(t *testing.T) {
			r := newRig(t) // fails on any reported read error
			announce(t, r.a, vip4)
			r.drain(t)
			r.pc.Inject(b)
			r.pc.Inject(valid)
			select {
			case got := <-r.pc.Written():
				if f := decode(t, got); f.Op != mdarp.OperationReply || f.THA != otherMAC.String() {
					t.Errorf("answer %+v, want the reply to the valid request", f)
				}
			case <-time.After(replyWait):
				t.Fatalf("no answer to a valid request after a %s frame", name)
			}
			if err := r.a.Healthy(); err != nil {
				t.Errorf("Healthy() = %v after a %s frame, want nil", err, name)
			}
		})
	}
}

// FuzzNDPMessage feeds arbitrary ICMPv6 messages from arbitrary senders
// through the announcer's decoding (what its ICMPv6 socket does with
// each read) to an announcer that owns vip6. It answers at most once,
// only a neighbour solicitation for vip6, with an advertisement of vip6
// to the sender (to all nodes for duplicate address detection).
func FuzzNDPMessage(f *testing.F) {
	ns, err := ndp.MarshalMessage(&ndp.NeighborSolicitation{TargetAddress: vip6,
		Options: []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Source, Addr: otherMAC}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(ns, client6.AsSlice())
	f.Add(ns, netip.IPv6Unspecified().AsSlice())
	f.Add(ns[:10], client6.AsSlice())
	f.Add(ns, []byte{10, 0, 0, 1})
	f.Add([]byte{135, 0, 0, 0}, []byte{})
	allNodes := netip.MustParseAddr("ff02::1")
	f.Fuzz(func(t *testing.T, data, src []byte) {
		// The kernel gives an ICMPv6 socket's senders as 16 bytes.
		src = append(src, make([]byte, net.IPv6len)...)[:net.IPv6len]
		m, from, err := arp.ParseNDP(data, &net.IPAddr{IP: src})
		if err != nil {
			return // the socket skips it
		}
		r := newRig(t)
		announce(t, r.a, vip6)
		nextNA(t, r.nc) // the unsolicited advertisement
		r.nc.Inject(arptest.NDPMessage{Msg: m, Src: from, IfIndex: 7})
		r.nc.Inject(arptest.NDPMessage{Msg: &ndp.NeighborSolicitation{TargetAddress: vip6}, Src: sentinel6, IfIndex: 7})
		var got []arptest.NDPMessage
		for {
			var w arptest.NDPMessage
			select {
			case w = <-r.nc.Written():
			case <-time.After(replyWait):
				t.Fatalf("no answer to the sentinel within %s after %x from %x", replyWait, data, src)
			}
			if w.Dst == sentinel6 {
				break
			}
			got = append(got, w)
		}
		if len(got) == 0 {
			return
		}
		sol, ok := m.(*ndp.NeighborSolicitation)
		if len(got) > 1 || !ok || sol.TargetAddress != vip6 {
			t.Fatalf("%T %+v from %s answered %d times, want at most once and only a solicitation for %s", m, m, from, len(got), vip6)
		}
		na, ok := got[0].Msg.(*ndp.NeighborAdvertisement)
		wantDst := from
		if from.IsUnspecified() {
			wantDst = allNodes
		}
		if !ok || na.TargetAddress != vip6 || got[0].Dst != wantDst {
			t.Fatalf("solicitation from %s answered %T %+v to %s, want an advertisement of %s to %s", from, got[0].Msg, got[0].Msg, got[0].Dst, vip6, wantDst)
		}
	})
}

var sentinel6 = netip.MustParseAddr("fd00::99")
