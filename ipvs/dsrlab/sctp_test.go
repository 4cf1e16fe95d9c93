//go:build linux

package dsrlab

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/test/netns"
)

// sctpFrontend is the IPv4 VIP's port over SCTP.
var sctpFrontend = model.VirtualServiceKey{Addr: vip, Port: vipPort, Protocol: model.SCTP}

// serveSCTP answers each message on an SCTP association to podPort
// (one-to-one sockets, through raw syscalls: Go has no SCTP) with the
// pod's name, the client address it sees and the message's size.
func serveSCTP(t *testing.T, p *pod) {
	t.Helper()
	var ln int
	do(t, p.ns, func() error {
		var err error
		if ln, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_SCTP); err != nil {
			return fmt.Errorf("sctp socket (is the sctp module loaded?): %w", err)
		}
		if err := unix.Bind(ln, &unix.SockaddrInet4{Port: podPort}); err != nil {
			return err
		}
		return unix.Listen(ln, 128)
	})
	t.Cleanup(func() { unix.Shutdown(ln, unix.SHUT_RDWR); unix.Close(ln) })
	go func() {
		for {
			fd, sa, err := unix.Accept(ln)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				return
			}
			from := "?"
			if in4, ok := sa.(*unix.SockaddrInet4); ok {
				from = netip.AddrPortFrom(netip.AddrFrom4(in4.Addr), uint16(in4.Port)).String()
			}
			go func() {
				defer unix.Close(fd)
				buf := make([]byte, 65536)
				for {
					n, err := unix.Read(fd, buf)
					if errors.Is(err, unix.EINTR) {
						continue
					}
					if err != nil || n == 0 {
						return
					}
					if _, err := unix.Write(fd, []byte(fmt.Sprintf("%s %s %d", p.name, from, n))); err != nil {
						return
					}
				}
			}()
		}
	}()
}

// sctpFlow is an SCTP association from the client to the VIP.
type sctpFlow struct {
	fd   int
	port int
	pod  string
}

// dialSCTP opens n associations from the client, each from its own port.
func (tp *topology) dialSCTP(t *testing.T, n int) []*sctpFlow {
	t.Helper()
	var out []*sctpFlow
	for range n {
		port, err := netns.NextSourcePort()
		if err != nil {
			t.Fatal(err)
		}
		f := &sctpFlow{port: port, fd: -1}
		do(t, tp.client, func() error {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_SCTP)
			if err != nil {
				return err
			}
			f.fd = fd
			tv := unix.NsecToTimeval(int64(10 * time.Second))
			if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
				return err
			}
			if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv); err != nil {
				return err
			}
			if err := unix.Bind(fd, &unix.SockaddrInet4{Port: port, Addr: clientIP.As4()}); err != nil {
				return err
			}
			if err := unix.Connect(fd, &unix.SockaddrInet4{Port: vipPort, Addr: vip.As4()}); err != nil {
				return fmt.Errorf("sctp connect from port %d: %w", port, err)
			}
			return nil
		})
		t.Cleanup(func() { unix.Close(f.fd) })
		out = append(out, f)
	}
	return out
}

// sctpRound sends one message on every association and counts those
// answered by the flow's pod, which saw the client's own address and
// port.
func sctpRound(flows []*sctpFlow) (ok int, perPod map[string]int, failures []string) {
	perPod = map[string]int{}
	buf := make([]byte, 512)
	for _, f := range flows {
		if _, err := unix.Write(f.fd, []byte("ping")); err != nil {
			failures = append(failures, fmt.Sprintf("sctp port %d: send: %v", f.port, err))
			continue
		}
		n, err := unix.Read(f.fd, buf)
		if err != nil || n == 0 {
			failures = append(failures, fmt.Sprintf("sctp port %d: read %d bytes: %v", f.port, n, err))
			continue
		}
		fields := strings.Fields(string(buf[:n]))
		switch {
		case len(fields) != 3 || !strings.HasPrefix(fields[0], "pod"):
			failures = append(failures, fmt.Sprintf("sctp port %d: answer %q", f.port, buf[:n]))
			continue
		case f.pod != "" && fields[0] != f.pod:
			failures = append(failures, fmt.Sprintf("sctp port %d: answered by %s, then by %s", f.port, f.pod, fields[0]))
			continue
		case fields[1] != netip.AddrPortFrom(clientIP, uint16(f.port)).String():
			failures = append(failures, fmt.Sprintf("sctp port %d: the pod saw the client as %s", f.port, fields[1]))
			continue
		}
		f.pod = fields[0]
		perPod[f.pod]++
		ok++
	}
	return ok, perPod, failures
}

// TestDSRSCTP carries 20 SCTP associations through the ECMP changes of
// TestDSRFlowsSurviveECMPChanges (sloppy_sctp lets a node take up an
// association mid-stream): each must stay on its pod, which sees the
// client's own address and port, and no packet from the VIP may leave
// through n3.
func TestDSRSCTP(t *testing.T) {
	requireGuest(t)
	tp := newTopology(t)
	for _, p := range tp.pods {
		serveSCTP(t, p)
	}
	tp.programDSR(t, model.IPIP)
	tp.countAtRouter(t)
	n1, n2 := tp.nodes[0], tp.nodes[1]
	tp.setECMP(t, n1, n2)
	flows := tp.dialSCTP(t, 20)
	tp.throughStages(t, "dsr-sctp-flows-kept", len(flows), func() (int, map[string]int, []string) { return sctpRound(flows) })
}
