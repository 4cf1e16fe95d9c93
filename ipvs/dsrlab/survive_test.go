//go:build linux

package dsrlab

import (
	"net"
	"net/netip"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/switchyard-lb/switchyard/core/model"
)

// flowsN is how many established flows each test carries through the
// ECMP changes.
const flowsN = 100

// bodySize makes each request span several full-size segments, which
// must fit the path once encapsulated.
const bodySize = 8000

// TestDSRFlowsSurviveECMPChanges opens flowsN kept-alive TCP flows to the
// LoadBalancer IP through the router's ECMP route over n1 and n2 (the
// pods' nodes), then changes the route: n3, which holds no endpoint,
// joins; n2 leaves; n1 leaves; n1 and n2 come back (a node leaving is a
// drain: its route withdrawn, it still serves its flows through the
// others). After each change every flow sends a request of bodySize
// bytes: all must be answered by the flow's first pod, which sees the
// client's own address and port, and no packet from the VIP may leave
// through n3, which serves nothing (the router counts packets from the VIP
// per node link).
//
// The IPv6 run (ip6ip6, half the flows) does the same to the IPv6 VIP.
func TestDSRFlowsSurviveECMPChanges(t *testing.T) {
	requireGuest(t)
	for _, tc := range []struct {
		name  string
		enc   model.Encapsulation
		to    netip.Addr
		flows int
	}{
		{"ipip", model.IPIP, vip, flowsN},
		{"gue", model.GUE, vip, flowsN},
		{"ipip-ipv6", model.IPIP, vip6, flowsN / 2},
		{"gue-ipv6", model.GUE, vip6, flowsN / 2},
	} {
		enc := tc.enc
		t.Run(tc.name, func(t *testing.T) {
			tp := newTopology(t)
			tp.programDSR(t, enc)
			tp.countAtRouter(t)
			n1, n2, n3 := tp.nodes[0], tp.nodes[1], tp.nodes[2]
			tp.setECMP(t, n1, n2)
			flows := tp.dialFlowsTo(t, tc.to, tc.flows)
			wantMSS := linkMTU - enc.Overhead() - 40
			if tc.to.Is6() {
				wantMSS = linkMTU - enc.Overhead6() - 60
			}
			if mss := clientMSS(t, flows[0].conn); mss > wantMSS {
				t.Errorf("client MSS %d, want at most %d (clamped for %s)", mss, wantMSS, enc)
			}
			prev := tp.readCounters(t)
			for _, st := range tp.ecmpStages() {
				tp.setECMP(t, st.nodes...)
				ok, perPod, failures := round(t, flows, bodySize)
				now := tp.readCounters(t)
				d := now.minus(prev)
				prev = now
				t.Logf("dsr-flows-kept run=%s encapsulation=%s stage=%q ecmp=%s kept=%d/%d per-pod=%v to-vip n1=%d n2=%d n3=%d from-vip n1=%d n2=%d n3=%d forwarded n1=%d n2=%d n3=%d",
					tc.name, enc, st.name, names(st.nodes), ok, len(flows), perPod, d.in["n1"], d.in["n2"], d.in["n3"], d.out["n1"], d.out["n2"], d.out["n3"], n1.takenUp(t), n2.takenUp(t), n3.takenUp(t))
				for _, f := range failures {
					t.Errorf("%s: %s", st.name, f)
				}
				if d.out["n3"] != 0 {
					t.Errorf("%s: %d packets from the VIP left through n3, which serves nothing: replies must leave their pod's node directly", st.name, d.out["n3"])
				}
				for _, n := range st.nodes {
					if d.in[n.name] == 0 {
						t.Errorf("%s: the router sent %s no packet: the ECMP route does not spread", st.name, n.name)
					}
				}
			}
			if n3.takenUp(t) == 0 {
				t.Error("n3 took up no flow: no flow moved, the test proves nothing")
			}
		})
	}
}

// TestDSRWithoutSloppyTCPBreaksMovedFlows is the control: with sloppy_tcp
// off on n3, the flows the router moves to n3 break (IPVS passes their
// mid-flow packets to the local stack, which resets them), so
// TestDSRFlowsSurviveECMPChanges would fail without it.
func TestDSRWithoutSloppyTCPBreaksMovedFlows(t *testing.T) {
	requireGuest(t)
	tp := newTopology(t)
	tp.programDSR(t, model.IPIP)
	n1, n2, n3 := tp.nodes[0], tp.nodes[1], tp.nodes[2]
	n3.setSloppy(t, false)
	tp.setECMP(t, n1, n2)
	flows := tp.dialFlows(t, flowsN/2)
	if ok, _, failures := round(t, flows, 100); ok != len(flows) {
		t.Fatalf("before the change %d of %d answered: %v", ok, len(flows), failures)
	}
	tp.setECMP(t, n1, n2, n3)
	ok, _, failures := round(t, flows, 100)
	t.Logf("dsr-flows-kept-without-sloppy-tcp kept=%d/%d", ok, len(flows))
	if len(failures) == 0 {
		t.Errorf("every flow survived with sloppy_tcp off at n3: none moved there, or IPVS took them up anyway")
	}
	if len(failures) > 3 {
		failures = failures[:3]
	}
	for _, f := range failures {
		t.Log(f) // what a moved flow's failure looks like
	}
}

// clientMSS is the client socket's MSS (TCP_MAXSEG): what the server's
// SYN-ACK allowed.
func clientMSS(t *testing.T, c net.Conn) int {
	t.Helper()
	return sockoptInt(t, c.(*net.TCPConn), unix.IPPROTO_TCP, unix.TCP_MAXSEG)
}

// sockoptInt reads an integer socket option.
func sockoptInt(t *testing.T, c syscall.Conn, level, opt int) int {
	t.Helper()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var serr error
	if err := raw.Control(func(fd uintptr) { v, serr = unix.GetsockoptInt(int(fd), level, opt) }); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatal(serr)
	}
	return v
}
