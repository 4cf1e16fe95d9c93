package arp_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	mdarp "github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"

	"github.com/switchyard-lb/switchyard/announcers/arp"
	"github.com/switchyard-lb/switchyard/announcers/arp/arptest"
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
)

var (
	ownMAC   = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x0a}
	otherMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x64}
	vip4     = netip.MustParseAddr("10.0.0.200")
	vip4b    = netip.MustParseAddr("10.0.0.201")
	client4  = netip.MustParseAddr("10.0.0.100")
	vip6     = netip.MustParseAddr("fd00::200")
	client6  = netip.MustParseAddr("fd00::100")
	ownLL    = netip.MustParseAddr("fe80::a")
)

// frame is the part of an ARP frame the tests compare.
type frame struct {
	EthDst string
	Op     mdarp.Operation
	SHA    string
	SIP    netip.Addr
	THA    string
	TIP    netip.Addr
}

func decode(t testing.TB, b []byte) frame {
	t.Helper()
	var f ethernet.Frame
	if err := f.UnmarshalBinary(b); err != nil {
		t.Fatalf("decoding Ethernet frame: %v", err)
	}
	var p mdarp.Packet
	if err := p.UnmarshalBinary(f.Payload); err != nil {
		t.Fatalf("decoding ARP packet: %v", err)
	}
	return frame{f.Destination.String(), p.Operation, p.SenderHardwareAddr.String(), p.SenderIP,
		p.TargetHardwareAddr.String(), p.TargetIP}
}

func encode(t testing.TB, f frame) []byte {
	t.Helper()
	sha, _ := net.ParseMAC(f.SHA)
	tha, _ := net.ParseMAC(f.THA)
	dst, _ := net.ParseMAC(f.EthDst)
	p, err := mdarp.NewPacket(f.Op, sha, f.SIP, tha, f.TIP)
	if err != nil {
		t.Fatalf("building ARP packet %+v: %v", f, err)
	}
	pb, _ := p.MarshalBinary()
	b, err := (&ethernet.Frame{Destination: dst, Source: sha, EtherType: ethernet.EtherTypeARP, Payload: pb}).MarshalBinary()
	if err != nil {
		t.Fatalf("building frame: %v", err)
	}
	return b
}

type rig struct {
	a   *arp.Announcer
	pc  *arptest.PacketConn
	nc  *arptest.NDPConn
	mu  sync.Mutex
	err []error
}

// newRig starts an announcer on one link "eth0" (index 7) whose ARP side
// is the real mdlayher client (through NewARPConn, as Open's) over an
// in-memory frame conn.
func newRig(t *testing.T) *rig { return newRigOnly(t, nil) }

func newRigOnly(t *testing.T, only []netip.Prefix) *rig {
	t.Helper()
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Skipf("no loopback interface to satisfy arp.New: %v", err)
	}
	r := &rig{pc: arptest.NewPacketConn(), nc: arptest.NewNDPConn()}
	ifi := *lo
	ifi.HardwareAddr = ownMAC
	c, err := arp.NewARPConn(&ifi, r.pc)
	if err != nil {
		t.Fatalf("NewARPConn: %v", err)
	}
	r.a = arp.New([]arp.Link{{Name: "eth0", Index: 7, MAC: ownMAC, ARP: c, NDP: r.nc, LinkLocal: ownLL, Only: only}},
		arp.Options{Repeats: -1, OnError: func(_ string, err error) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.err = append(r.err, err)
		}})
	t.Cleanup(func() {
		if err := r.a.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, err := range r.err {
			t.Errorf("reader error: %v", err)
		}
	})
	return r
}

func announce(t *testing.T, a *arp.Announcer, addrs ...netip.Addr) {
	t.Helper()
	set := []model.Announcement{}
	for _, addr := range addrs {
		set = append(set, model.Announcement{Addr: addr, Service: model.ServiceKey{Namespace: "default", Name: "web"}})
	}
	if err := a.Announce(context.Background(), set); err != nil {
		t.Fatalf("Announce(%v): %v", addrs, err)
	}
}

// drain returns the frames written so far; Announce writes synchronously.
func (r *rig) drain(t *testing.T) []frame {
	t.Helper()
	var out []frame
	for {
		select {
		case b := <-r.pc.Written():
			out = append(out, decode(t, b))
		default:
			return out
		}
	}
}

func TestAnnounceSendsGratuitousARPOncePerGain(t *testing.T) {
	r := newRig(t)
	garp := func(ip netip.Addr) []frame {
		return []frame{
			{EthDst: "ff:ff:ff:ff:ff:ff", Op: mdarp.OperationRequest, SHA: ownMAC.String(), SIP: ip, THA: "ff:ff:ff:ff:ff:ff", TIP: ip},
			{EthDst: "ff:ff:ff:ff:ff:ff", Op: mdarp.OperationReply, SHA: ownMAC.String(), SIP: ip, THA: ownMAC.String(), TIP: ip},
		}
	}
	steps := []struct {
		name string
		set  []netip.Addr
		want []frame
	}{
		{"gain one", []netip.Addr{vip4}, garp(vip4)},
		{"same set again", []netip.Addr{vip4}, nil},
		{"gain a second, keep the first", []netip.Addr{vip4, vip4b}, garp(vip4b)},
		{"duplicates collapse", []netip.Addr{vip4b, vip4b}, nil},
		{"withdraw all", nil, nil},
		{"regain after withdraw", []netip.Addr{vip4}, garp(vip4)},
	}
	for _, s := range steps {
		announce(t, r.a, s.set...)
		if diff := cmp.Diff(s.want, r.drain(t), addrCmp); diff != "" {
			t.Errorf("%s: frames sent (-want +got):\n%s", s.name, diff)
		}
	}
}

func TestRepliesOnlyToRequestsForOwnedAddresses(t *testing.T) {
	req := func(mod func(*frame)) frame {
		f := frame{EthDst: "ff:ff:ff:ff:ff:ff", Op: mdarp.OperationRequest, SHA: otherMAC.String(), SIP: client4,
			THA: "00:00:00:00:00:00", TIP: vip4}
		if mod != nil {
			mod(&f)
		}
		return f
	}
	reply := func(tip netip.Addr) *frame {
		return &frame{EthDst: otherMAC.String(), Op: mdarp.OperationReply, SHA: ownMAC.String(), SIP: tip,
			THA: otherMAC.String(), TIP: client4}
	}
	tests := []struct {
		name string
		in   frame
		want *frame
	}{
		{"broadcast request for owned", req(nil), reply(vip4)},
		{"unicast request to us", req(func(f *frame) { f.EthDst = ownMAC.String() }), reply(vip4)},
		{"probe from 0.0.0.0", req(func(f *frame) { f.SIP = netip.IPv4Unspecified() }),
			&frame{EthDst: otherMAC.String(), Op: mdarp.OperationReply, SHA: ownMAC.String(), SIP: vip4,
				THA: otherMAC.String(), TIP: netip.IPv4Unspecified()}},
		{"not owned", req(func(f *frame) { f.TIP = vip4b }), nil},
		{"our own gratuitous request", req(func(f *frame) { f.SHA = ownMAC.String() }), nil},
		{"another node's gratuitous request", req(func(f *frame) { f.SIP = vip4 }), nil},
		{"a reply", req(func(f *frame) { f.Op = mdarp.OperationReply }), nil},
		{"unicast to someone else", req(func(f *frame) { f.EthDst = "02:00:00:00:00:0b" }), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t)
			announce(t, r.a, vip4)
			r.drain(t)
			r.pc.Inject(encode(t, tt.in))
			// The reader handles frames in order: the answer to this
			// sentinel comes after any answer to the frame under test.
			sentinel := req(func(f *frame) { f.SIP = netip.MustParseAddr("10.0.0.99") })
			r.pc.Inject(encode(t, sentinel))
			var got []frame
			for {
				f := decode(t, <-r.pc.Written())
				if f.TIP == sentinel.SIP {
					break
				}
				got = append(got, f)
			}
			var want []frame
			if tt.want != nil {
				want = append(want, *tt.want)
			}
			if diff := cmp.Diff(want, got, addrCmp); diff != "" {
				t.Errorf("replies (-want +got):\n%s", diff)
			}
		})
	}
}

// answered reports whether a request for ip gets a reply, using a
// sentinel request for owned to order the reader's output.
func (r *rig) answered(t *testing.T, ip, owned netip.Addr) bool {
	t.Helper()
	for _, tip := range []netip.Addr{ip, owned} {
		r.pc.Inject(encode(t, frame{EthDst: "ff:ff:ff:ff:ff:ff", Op: mdarp.OperationRequest, SHA: otherMAC.String(),
			SIP: client4, THA: "00:00:00:00:00:00", TIP: tip}))
	}
	first := decode(t, <-r.pc.Written())
	if first.SIP != ip {
		return false // that was the sentinel's reply
	}
	<-r.pc.Written() // the sentinel's reply
	return true
}

func TestWithdrawStopsAnswering(t *testing.T) {
	r := newRig(t)
	announce(t, r.a, vip4, vip4b)
	r.drain(t)
	if !r.answered(t, vip4, vip4b) {
		t.Fatalf("request for owned %s not answered", vip4)
	}
	announce(t, r.a, vip4b)
	if r.answered(t, vip4, vip4b) {
		t.Errorf("request for withdrawn %s answered", vip4)
	}
	if diff := cmp.Diff([]netip.Addr{vip4b}, r.a.Owned(), addrCmp); diff != "" {
		t.Errorf("Owned (-want +got):\n%s", diff)
	}
}

func TestAnnounceRetriesFailedGratuitousARP(t *testing.T) {
	r := newRig(t)
	boom := errors.New("link down")
	r.pc.FailWrites(boom)
	set := []model.Announcement{{Addr: vip4}}
	err := r.a.Announce(context.Background(), set)
	if !errors.Is(err, boom) {
		t.Fatalf("Announce with failing writes = %v, want %v", err, boom)
	}
	// The failure names its address, for the AnnounceFailed Event.
	var failed []string
	for _, e := range plugin.AddrErrors(err) {
		failed = append(failed, fmt.Sprintf("%s withdraw=%v", e.Addr, e.Withdraw))
	}
	if diff := cmp.Diff([]string{vip4.String() + " withdraw=false"}, failed); diff != "" {
		t.Errorf("addresses of the failure (-want +got):\n%s", diff)
	}
	r.pc.FailWrites(nil)
	if !r.answered(t, vip4, vip4) {
		t.Error("an address whose announcement failed is not answered")
	}
	r.drain(t)
	announce(t, r.a, vip4)
	if got := len(r.drain(t)); got != 2 {
		t.Errorf("retry sent %d frames, want the gratuitous pair", got)
	}
	announce(t, r.a, vip4)
	if got := len(r.drain(t)); got != 0 {
		t.Errorf("after a successful retry Announce sent %d frames, want 0", got)
	}
}

func TestAnnounceRejects(t *testing.T) {
	tests := []struct {
		name  string
		links []arp.Link
		addr  netip.Addr
	}{
		{"invalid address", nil, netip.Addr{}},
		{"multicast", nil, netip.MustParseAddr("224.0.0.1")},
		{"no IPv6 link", []arp.Link{{Name: "eth0", MAC: ownMAC, ARP: nil, NDP: nil}}, vip6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := arp.New(tt.links, arp.Options{})
			defer a.Close()
			err := a.Announce(context.Background(), []model.Announcement{{Addr: tt.addr}})
			if err == nil {
				t.Errorf("Announce(%v) = nil, want an error", tt.addr)
			}
		})
	}
}

type sentNA struct {
	Dst, Src         netip.Addr
	IfIndex          int
	Solicited        bool
	Override, Router bool
	Target           netip.Addr
	TLLA             string
}

func nextNA(t *testing.T, c *arptest.NDPConn) sentNA {
	t.Helper()
	m := <-c.Written()
	na, ok := m.Msg.(*ndp.NeighborAdvertisement)
	if !ok {
		t.Fatalf("wrote %T, want a neighbour advertisement", m.Msg)
	}
	s := sentNA{Dst: m.Dst, Src: m.Src, IfIndex: m.IfIndex, Solicited: na.Solicited, Override: na.Override,
		Router: na.Router, Target: na.TargetAddress}
	for _, o := range na.Options {
		if lla, ok := o.(*ndp.LinkLayerAddress); ok && lla.Direction == ndp.Target {
			s.TLLA = lla.Addr.String()
		}
	}
	return s
}

var addrCmp = cmp.Comparer(func(a, b netip.Addr) bool { return a == b })

func TestNDP(t *testing.T) {
	r := newRig(t)
	group := netip.MustParseAddr("ff02::1:ff00:200")
	vip6b := netip.MustParseAddr("fd01::200") // same solicited-node group

	announce(t, r.a, vip6)
	want := sentNA{Dst: netip.MustParseAddr("ff02::1"), Src: ownLL, IfIndex: 7, Override: true, Target: vip6, TLLA: ownMAC.String()}
	if diff := cmp.Diff(want, nextNA(t, r.nc), addrCmp); diff != "" {
		t.Errorf("unsolicited advertisement (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]netip.Addr{group}, r.nc.Groups(), addrCmp); diff != "" {
		t.Errorf("groups after announce (-want +got):\n%s", diff)
	}
	if len(r.drain(t)) != 0 {
		t.Error("an IPv6 announcement sent ARP frames")
	}

	ns := func(target, src netip.Addr, ifIndex int) arptest.NDPMessage {
		return arptest.NDPMessage{Msg: &ndp.NeighborSolicitation{TargetAddress: target}, Src: src, IfIndex: ifIndex}
	}
	// Ignored first, then answered: the reader is sequential.
	r.nc.Inject(ns(netip.MustParseAddr("fd00::999"), client6, 7))
	r.nc.Inject(ns(vip6, client6, 8)) // another interface's traffic
	r.nc.Inject(ns(vip6, client6, 7))
	want = sentNA{Dst: client6, Src: ownLL, IfIndex: 7, Solicited: true, Override: true, Target: vip6, TLLA: ownMAC.String()}
	if diff := cmp.Diff(want, nextNA(t, r.nc), addrCmp); diff != "" {
		t.Errorf("answer to solicitation (-want +got):\n%s", diff)
	}
	r.nc.Inject(ns(vip6, netip.IPv6Unspecified(), 7))
	want = sentNA{Dst: netip.MustParseAddr("ff02::1"), Src: ownLL, IfIndex: 7, Override: true, Target: vip6, TLLA: ownMAC.String()}
	if diff := cmp.Diff(want, nextNA(t, r.nc), addrCmp); diff != "" {
		t.Errorf("answer to duplicate address detection (-want +got):\n%s", diff)
	}

	announce(t, r.a, vip6, vip6b)
	nextNA(t, r.nc)
	announce(t, r.a, vip6b)
	if diff := cmp.Diff([]netip.Addr{group}, r.nc.Groups(), addrCmp); diff != "" {
		t.Errorf("groups while a sharer is owned (-want +got):\n%s", diff)
	}
	announce(t, r.a)
	if diff := cmp.Diff([]netip.Addr{}, r.nc.Groups(), addrCmp); diff != "" {
		t.Errorf("groups after withdraw (-want +got):\n%s", diff)
	}
}

func TestCloseStopsAnswering(t *testing.T) {
	pc, nc := arptest.NewPacketConn(), arptest.NewNDPConn()
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Skipf("no loopback interface: %v", err)
	}
	c, err := mdarp.New(lo, pc)
	if err != nil {
		t.Fatal(err)
	}
	a := arp.New([]arp.Link{{Name: "eth0", MAC: ownMAC, ARP: c, NDP: nc}}, arp.Options{})
	announce(t, a, vip4)
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if !pc.Closed() || !nc.Closed() {
		t.Errorf("sockets closed: ARP %v, NDP %v; want both", pc.Closed(), nc.Closed())
	}
	if err := a.Announce(context.Background(), nil); !errors.Is(err, arp.ErrClosed) {
		t.Errorf("Announce after Close = %v, want ErrClosed", err)
	}
	if err := a.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestConcurrentAnnounceAndRequests(t *testing.T) {
	r := newRig(t)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := range 50 {
			addrs := []netip.Addr{vip4}
			if i%2 == 0 {
				addrs = append(addrs, vip4b)
			}
			announce(t, r.a, addrs...)
		}
	}()
	go func() {
		defer wg.Done()
		for range 50 {
			r.pc.Inject(encode(t, frame{EthDst: "ff:ff:ff:ff:ff:ff", Op: mdarp.OperationRequest, SHA: otherMAC.String(),
				SIP: client4, THA: "00:00:00:00:00:00", TIP: vip4b}))
		}
	}()
	go func() {
		for range r.pc.Written() {
		}
	}()
	wg.Wait()
}

func TestSubnetLimitedLink(t *testing.T) {
	r := newRigOnly(t, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("fd00::/64")})
	outside4, outside6 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")
	for _, addr := range []netip.Addr{outside4, outside6} {
		if err := r.a.Announce(context.Background(), []model.Announcement{{Addr: addr}}); err == nil {
			t.Errorf("Announce(%s) outside the link's subnets = nil, want an error", addr)
		}
	}
	if got := r.drain(t); len(got) != 0 {
		t.Errorf("frames sent for addresses outside the subnets: %+v", got)
	}
	if diff := cmp.Diff([]netip.Addr{}, r.nc.Groups(), addrCmp); diff != "" {
		t.Errorf("groups joined for an address outside the subnets (-want +got):\n%s", diff)
	}
	if err := r.a.Announce(context.Background(), []model.Announcement{{Addr: vip4}, {Addr: outside4}}); err == nil {
		t.Errorf("Announce with %s outside the subnets = nil, want an error", outside4)
	}
	r.drain(t)
	if r.answered(t, outside4, vip4) {
		t.Errorf("request for %s outside the link's subnets answered", outside4)
	}
	if !r.answered(t, vip4, vip4) {
		t.Errorf("request for %s inside the link's subnets not answered", vip4)
	}
}

func TestReadErrorsAreReportedAndHealthy(t *testing.T) {
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Skipf("no loopback interface to satisfy arp.New: %v", err)
	}
	pc := arptest.NewPacketConn()
	ifi := *lo
	ifi.HardwareAddr = ownMAC
	c, err := mdarp.New(&ifi, pc)
	if err != nil {
		t.Fatal(err)
	}
	reported := make(chan error, 1)
	a := arp.New([]arp.Link{{Name: "eth0", MAC: ownMAC, ARP: c}}, arp.Options{
		Repeats: -1,
		OnError: func(link string, err error) { reported <- fmt.Errorf("%s: %w", link, err) },
	})
	defer a.Close()
	announce(t, a, vip4)
	for range len(pc.Written()) {
		<-pc.Written()
	}
	if err := a.Healthy(); err != nil {
		t.Fatalf("Healthy before any failure = %v", err)
	}

	boom := errors.New("ENETDOWN")
	pc.InjectReadError(boom)
	if err := <-reported; !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "eth0: ") {
		t.Errorf("OnError got %v, want the read error for eth0", err)
	}
	if err := a.Healthy(); !errors.Is(err, boom) {
		t.Errorf("Healthy while reads fail = %v, want %v", err, boom)
	}

	// The reader carries on: the next request is answered and health
	// comes back.
	pc.Inject(encode(t, frame{EthDst: "ff:ff:ff:ff:ff:ff", Op: mdarp.OperationRequest, SHA: otherMAC.String(),
		SIP: client4, THA: "00:00:00:00:00:00", TIP: vip4}))
	if got := decode(t, <-pc.Written()); got.SIP != vip4 {
		t.Errorf("after a read error the reply was for %s, want %s", got.SIP, vip4)
	}
	if err := a.Healthy(); err != nil {
		t.Errorf("Healthy after a good read = %v, want nil", err)
	}
}

func TestFailedGroupJoinIsRetried(t *testing.T) {
	r := newRig(t)
	boom := errors.New("ENOBUFS")
	r.nc.FailJoins(boom)
	if err := r.a.Announce(context.Background(), []model.Announcement{{Addr: vip6}}); !errors.Is(err, boom) {
		t.Fatalf("Announce with failing joins = %v, want %v", err, boom)
	}
	nextNA(t, r.nc)
	r.nc.FailJoins(nil)
	announce(t, r.a, vip6)
	nextNA(t, r.nc) // not fully announced before, so announced again
	if diff := cmp.Diff([]netip.Addr{netip.MustParseAddr("ff02::1:ff00:200")}, r.nc.Groups(), addrCmp); diff != "" {
		t.Errorf("groups after the retry (-want +got):\n%s", diff)
	}
	announce(t, r.a)
	if diff := cmp.Diff([]netip.Addr{}, r.nc.Groups(), addrCmp); diff != "" {
		t.Errorf("groups after withdraw (-want +got):\n%s", diff)
	}
}
