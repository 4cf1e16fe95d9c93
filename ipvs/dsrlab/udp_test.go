//go:build linux

package dsrlab

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/test/netns"
)

// udpFlow is a connected UDP socket from the client to the VIP's UDP
// frontend, from its own source port: being connected, it takes answers
// from the VIP's address and port only.
type udpFlow struct {
	conn *net.UDPConn
	port int
	pod  string
	// src is the client's address, the one the pod must see.
	src netip.Addr
}

// dialUDP opens n UDP flows to the IPv4 VIP; with df, the kernel sets DF
// and never fragments (IP_PMTUDISC_DO), else it fragments and clears DF
// (IP_PMTUDISC_DONT).
func (tp *topology) dialUDP(t *testing.T, n int, df bool) []*udpFlow {
	t.Helper()
	return tp.dialUDPTo(t, vip, n, df)
}

// dialUDPTo opens n UDP flows to to (for IPv6, df sets
// IPV6_MTU_DISCOVER alike: the sender fragments or not).
func (tp *topology) dialUDPTo(t *testing.T, to netip.Addr, n int, df bool) []*udpFlow {
	t.Helper()
	mode := map[bool]int{true: unix.IP_PMTUDISC_DO, false: unix.IP_PMTUDISC_DONT}[df]
	level, opt, network, src := unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, "udp4", clientIP
	if to.Is6() {
		mode = map[bool]int{true: unix.IPV6_PMTUDISC_DO, false: unix.IPV6_PMTUDISC_DONT}[df]
		level, opt, network, src = unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, "udp6", clientIP6
	}
	var out []*udpFlow
	for range n {
		port, err := netns.NextSourcePort()
		if err != nil {
			t.Fatal(err)
		}
		var c *net.UDPConn
		do(t, tp.client, func() error {
			var err error
			c, err = net.DialUDP(network, &net.UDPAddr{Port: port}, net.UDPAddrFromAddrPort(netip.AddrPortFrom(to, vipPort)))
			if err != nil {
				return err
			}
			raw, err := c.SyscallConn()
			if err != nil {
				return err
			}
			var serr error
			if err := raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), level, opt, mode) }); err != nil {
				return err
			}
			return serr
		})
		t.Cleanup(func() { c.Close() })
		out = append(out, &udpFlow{conn: c, port: port, src: src})
	}
	return out
}

// exchange sends a datagram of size bytes and returns the answer, trying
// three times (UDP may lose one under load).
func (f *udpFlow) exchange(size int) (string, error) {
	buf := make([]byte, 512)
	var err error
	for range 3 {
		if _, err = f.conn.Write(make([]byte, size)); err != nil {
			return "", fmt.Errorf("send %d bytes: %w", size, err)
		}
		f.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		var n int
		if n, err = f.conn.Read(buf); err == nil {
			return string(buf[:n]), nil
		}
	}
	return "", fmt.Errorf("no answer to %d bytes in 3 tries: %w", size, err)
}

// udpRound sends one datagram of size bytes on every flow and counts
// those answered from the VIP by the flow's pod, which saw the client's
// own address and port and the whole datagram.
func udpRound(flows []*udpFlow, size int) (ok int, perPod map[string]int, failures []string) {
	perPod = map[string]int{}
	for _, f := range flows {
		body, err := f.exchange(size)
		if err != nil {
			failures = append(failures, fmt.Sprintf("udp port %d: %v", f.port, err))
			continue
		}
		fields := strings.Fields(body)
		switch {
		case len(fields) != 3 || !strings.HasPrefix(fields[0], "pod"):
			failures = append(failures, fmt.Sprintf("udp port %d: answer %q", f.port, body))
			continue
		case f.pod != "" && fields[0] != f.pod:
			failures = append(failures, fmt.Sprintf("udp port %d: answered by %s, then by %s", f.port, f.pod, fields[0]))
			continue
		case fields[1] != netip.AddrPortFrom(f.src, uint16(f.port)).String():
			failures = append(failures, fmt.Sprintf("udp port %d: the pod saw the client as %s", f.port, fields[1]))
			continue
		case fields[2] != fmt.Sprint(size):
			failures = append(failures, fmt.Sprintf("udp port %d: the pod got %s bytes of %d", f.port, fields[2], size))
			continue
		}
		f.pod = fields[0]
		perPod[f.pod]++
		ok++
	}
	return ok, perPod, failures
}

// udpFlowsN is how many UDP flows TestDSRUDP carries.
const udpFlowsN = 40

// fragSize is a datagram larger than the client's link MTU: the client
// fragments it.
const fragSize = 3000

// TestDSRUDP carries udpFlowsN UDP flows to the IPv4 VIP and half as many
// to the IPv6 VIP (connected sockets: answers must come from the VIP's
// address and port) through the ECMP changes of
// TestDSRFlowsSurviveECMPChanges: each flow must stay on its pod, which
// sees the client's address and port, and no packet from the VIP may
// leave through n3. Then, through n3 alone (every flow forwarded through
// a tunnel), datagrams of fragSize bytes that the client fragments must
// arrive whole (the ingress node's conntrack reassembles them before the
// hash, the tunnel fragments the outer packet, the backend node
// reassembles it), and a datagram with DF set that no longer fits once
// encapsulated must bring the client an ICMP "fragmentation needed" with
// the MTU minus the encapsulation's overhead (the UDP limit of
// docs/dsr.md), after which the client's path MTU to the VIP is that.
// Fragmented datagrams to the IPv6 VIP are not sent: larger than the
// tunnel's MTU they do not get through (docs/dsr.md).
func TestDSRUDP(t *testing.T) {
	requireGuest(t)
	const enc = model.IPIP
	tp := newTopology(t)
	tp.programDSR(t, enc)
	tp.countAtRouter(t)
	n1, n2, n3 := tp.nodes[0], tp.nodes[1], tp.nodes[2]
	tp.setECMP(t, n1, n2)
	flows := slices.Concat(tp.dialUDP(t, udpFlowsN, false), tp.dialUDPTo(t, vip6, udpFlowsN/2, false))
	tp.throughStages(t, "dsr-udp-flows-kept", len(flows), func() (int, map[string]int, []string) { return udpRound(flows, 100) })

	tp.setECMP(t, n3)
	ok, _, failures := udpRound(flows[:udpFlowsN], fragSize)
	t.Logf("dsr-udp-fragmented size=%d kept=%d/%d", fragSize, ok, udpFlowsN)
	for _, f := range failures {
		t.Errorf("fragmented datagrams: %s", f)
	}

	limit := linkMTU - enc.Overhead()
	df := tp.dialUDP(t, 1, true)[0]
	if _, err := df.exchange(limit - 28); err != nil {
		t.Errorf("a DF datagram of %d bytes (IP %d) that fits the tunnel: %v", limit-28, limit, err)
	}
	// One that fits the client's link but not the tunnel: IPVS at n3
	// answers "fragmentation needed", the client's send fails or goes
	// unanswered, and its path MTU to the VIP drops to the limit.
	_, err := df.exchange(linkMTU - 28)
	mtu := pathMTU(t, df.conn)
	t.Logf("dsr-udp-df-limit encapsulation=%s sent-ip=%d err=%v client-path-mtu=%d", enc, linkMTU, err, mtu)
	if err == nil {
		t.Errorf("a DF datagram of IP size %d went through a tunnel that adds %d bytes to a %d-byte MTU", linkMTU, enc.Overhead(), linkMTU)
	} else if !errors.Is(err, unix.EMSGSIZE) && !errors.Is(err, unix.ECONNREFUSED) && !strings.Contains(err.Error(), "no answer") {
		t.Errorf("DF datagram: %v", err)
	}
	if mtu != limit {
		t.Errorf("client path MTU to the VIP %d, want %d (ICMP fragmentation needed from the ingress node)", mtu, limit)
	}
}

// pathMTU is a connected socket's path MTU (IP_MTU).
func pathMTU(t *testing.T, c *net.UDPConn) int {
	t.Helper()
	return sockoptInt(t, c, unix.IPPROTO_IP, unix.IP_MTU)
}
