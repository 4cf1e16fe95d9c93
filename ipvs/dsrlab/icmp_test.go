//go:build linux

package dsrlab

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/switchyard-lb/switchyard/core/model"
)

// ptbMTU and ptbMTU6 are the MTUs the router's "fragmentation needed"
// and "packet too big" errors announce.
const (
	ptbMTU  = 1200
	ptbMTU6 = 1280
)

// TestDSRICMPErrorsReachTheFlowsNode: UDP flows start through n1 and n2;
// then the router's route goes to n3 alone, which never saw them, and the
// router sends, per flow, an ICMP "fragmentation needed" (MTU ptbMTU; for
// IPv6 an ICMPv6 "packet too big", MTU ptbMTU6) to the VIP quoting one of
// the flow's replies (VIP:80 -> client:port), as a router on the way to
// the client would. n3 holds no connection for the flows; its dsr table
// hashes the quoted destination as the flow's source and IPVS
// (schedule_icmp) forwards the error to the flow's node, whose IPVS hands
// it to the flow's pod: every pod must receive, on a raw socket, the
// errors of exactly its flows, NATed to quote its own address and port.
func TestDSRICMPErrorsReachTheFlowsNode(t *testing.T) {
	requireGuest(t)
	tp := newTopology(t)
	tp.programDSR(t, model.IPIP)
	n1, n2, n3 := tp.nodes[0], tp.nodes[1], tp.nodes[2]
	for _, to := range []netip.Addr{vip, vip6} {
		t.Run(map[bool]string{false: "ipv4", true: "ipv6"}[to.Is6()], func(t *testing.T) {
			tp.setECMP(t, n1, n2)
			flows := tp.dialUDPTo(t, to, 20, false)
			if ok, _, failures := udpRound(flows, 100); ok != len(flows) {
				t.Fatalf("before the errors %d of %d flows answered: %v", ok, len(flows), failures)
			}
			af, proto := unix.AF_INET, unix.IPPROTO_ICMP
			if to.Is6() {
				af, proto = unix.AF_INET6, unix.IPPROTO_ICMPV6
			}
			// Each pod's raw ICMP socket collects the client ports the
			// errors it receives quote.
			var mu sync.Mutex
			got := map[string][]int{}
			var stop atomic.Bool
			t.Cleanup(func() { stop.Store(true) })
			deadline := time.Now().Add(30 * time.Second)
			for _, p := range tp.pods {
				var fd int
				do(t, p.ns, func() error {
					var err error
					fd, err = unix.Socket(af, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
					if err != nil {
						return err
					}
					tv := unix.NsecToTimeval(int64(time.Second))
					return unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
				})
				t.Cleanup(func() { unix.Close(fd) })
				go func() {
					buf := make([]byte, 2048)
					for !stop.Load() && time.Now().Before(deadline) {
						n, _, err := unix.Recvfrom(fd, buf, 0)
						if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
							continue
						}
						if err != nil {
							return
						}
						quoted, ok := quotedPort(buf[:n], p.addr)
						if to.Is6() {
							quoted, ok = quotedPort6(buf[:n], p.addr6)
						}
						if ok {
							mu.Lock()
							got[p.name] = append(got[p.name], quoted)
							mu.Unlock()
						}
					}
				}()
			}
			tp.setECMP(t, n3)
			do(t, tp.router, func() error {
				fd, err := unix.Socket(af, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
				if err != nil {
					return err
				}
				defer unix.Close(fd)
				for _, f := range flows {
					msg, sa := fragNeeded(uint16(f.port)), unix.Sockaddr(&unix.SockaddrInet4{Addr: vip.As4()})
					if to.Is6() {
						msg, sa = packetTooBig6(uint16(f.port)), &unix.SockaddrInet6{Addr: vip6.As16()}
					}
					if err := unix.Sendto(fd, msg, 0, sa); err != nil {
						return fmt.Errorf("send the error for port %d: %w", f.port, err)
					}
				}
				return nil
			})
			for time.Now().Before(deadline) {
				mu.Lock()
				n := countPorts(got)
				mu.Unlock()
				if n >= len(flows) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			stop.Store(true)
			mu.Lock()
			defer mu.Unlock()
			want := map[string][]int{}
			for _, f := range flows {
				want[f.pod] = append(want[f.pod], f.port)
			}
			perPod := map[string]int{}
			for pod, ports := range got {
				perPod[pod] = len(ports)
			}
			t.Logf("dsr-icmp-errors family=%s flows=%d sent-through=n3 received-per-pod=%v", t.Name(), len(flows), perPod)
			for pod, ports := range want {
				missing := map[int]bool{}
				for _, p := range ports {
					missing[p] = true
				}
				for _, p := range got[pod] {
					delete(missing, p)
				}
				if len(missing) > 0 {
					t.Errorf("%s did not receive the errors for %d of its %d flows (ingress n3 holds no connection for them)", pod, len(missing), len(ports))
				}
				for _, p := range got[pod] {
					if !slices.Contains(ports, p) {
						t.Errorf("%s received the error for port %d, another pod's flow", pod, p)
					}
				}
			}
		})
	}
}

func countPorts(m map[string][]int) int {
	n := 0
	for _, ps := range m {
		n += len(ps)
	}
	return n
}

// fragNeeded is an ICMP "fragmentation needed" (MTU ptbMTU) quoting a UDP
// reply from the VIP's port to the client's port.
func fragNeeded(clientPort uint16) []byte {
	q := make([]byte, 28)
	q[0] = 0x45
	binary.BigEndian.PutUint16(q[2:], 1400)
	binary.BigEndian.PutUint16(q[6:], 0x4000) // DF
	q[8], q[9] = 64, unix.IPPROTO_UDP
	v, c := vip.As4(), clientIP.As4()
	copy(q[12:], v[:])
	copy(q[16:], c[:])
	binary.BigEndian.PutUint16(q[10:], checksum(q[:20]))
	binary.BigEndian.PutUint16(q[20:], vipPort)
	binary.BigEndian.PutUint16(q[22:], clientPort)
	binary.BigEndian.PutUint16(q[24:], 1380)
	m := append([]byte{3, 4, 0, 0, 0, 0, byte(ptbMTU >> 8), byte(ptbMTU & 0xff)}, q...)
	binary.BigEndian.PutUint16(m[2:], checksum(m))
	return m
}

// quotedPort reads an IPv4 packet from a raw ICMP socket: for a
// "fragmentation needed" quoting a UDP packet from pod:podPort, it
// returns the quoted destination port.
func quotedPort(b []byte, pod netip.Addr) (int, bool) {
	if len(b) < 20 {
		return 0, false
	}
	ihl := int(b[0]&0xf) * 4
	icmp := b[ihl:]
	if len(icmp) < 8+28 || icmp[0] != 3 || icmp[1] != 4 || binary.BigEndian.Uint16(icmp[6:]) != ptbMTU {
		return 0, false
	}
	q := icmp[8:]
	qihl := int(q[0]&0xf) * 4
	src, _ := netip.AddrFromSlice(q[12:16])
	if q[9] != unix.IPPROTO_UDP || src != pod || len(q) < qihl+4 || binary.BigEndian.Uint16(q[qihl:]) != podPort {
		return 0, false
	}
	return int(binary.BigEndian.Uint16(q[qihl+2:])), true
}

// packetTooBig6 is an ICMPv6 "packet too big" (MTU ptbMTU6) quoting a UDP
// reply from the IPv6 VIP's port to the client's port; the kernel fills
// in the checksum of a raw ICMPv6 socket's messages.
func packetTooBig6(clientPort uint16) []byte {
	q := make([]byte, 48)
	q[0] = 0x60
	binary.BigEndian.PutUint16(q[4:], 1400)
	q[6], q[7] = unix.IPPROTO_UDP, 64
	v, c := vip6.As16(), clientIP6.As16()
	copy(q[8:], v[:])
	copy(q[24:], c[:])
	binary.BigEndian.PutUint16(q[40:], vipPort)
	binary.BigEndian.PutUint16(q[42:], clientPort)
	binary.BigEndian.PutUint16(q[44:], 1400)
	m := []byte{2, 0, 0, 0, 0, 0, byte(ptbMTU6 >> 8), byte(ptbMTU6 & 0xff)}
	return append(m, q...)
}

// quotedPort6 reads an ICMPv6 message from a raw socket (no IPv6 header):
// for a "packet too big" quoting a UDP packet from pod:podPort, it
// returns the quoted destination port.
func quotedPort6(b []byte, pod netip.Addr) (int, bool) {
	if len(b) < 8+44 || b[0] != 2 || binary.BigEndian.Uint32(b[4:]) != ptbMTU6 {
		return 0, false
	}
	q := b[8:]
	src, _ := netip.AddrFromSlice(q[8:24])
	if q[6] != unix.IPPROTO_UDP || src != pod || binary.BigEndian.Uint16(q[40:]) != podPort {
		return 0, false
	}
	return int(binary.BigEndian.Uint16(q[42:])), true
}

// checksum is the Internet checksum.
func checksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}
