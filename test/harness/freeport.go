package harness

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Ports below the kernel's ephemeral range (net.ipv4.ip_local_port_range)
// are never handed to an outgoing connection or a listener on port 0, so a
// port picked there and found free stays free until the daemon binds it,
// unless another test picks the very same one at random in between. A
// port from inside the range does not: the kernel may give it to any
// process's next connection or ":0" listener meanwhile, which is how tests
// of parallel packages took each other's ports
// (TestIntegrationLoadBalancer, "bind: address already in use").
const (
	lowestPort   = 10000
	rangeFile    = "/proc/sys/net/ipv4/ip_local_port_range"
	defaultFirst = 32768
)

var handedOut = struct {
	sync.Mutex
	ports map[netip.AddrPort]bool
}{ports: map[netip.AddrPort]bool{}}

// FreePort returns a TCP port on addr that was free a moment ago, picked
// at random below the kernel's ephemeral range and never returned twice
// by one test process, so that configs written before any daemon binds
// get distinct ports.
func FreePort(t testing.TB, addr netip.Addr) int {
	t.Helper()
	p, err := PickPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// PickPort is FreePort for code outside a test (a test's control plane
// picking its etcd and API server ports).
func PickPort(addr netip.Addr) (int, error) {
	return freePort(addr, ephemeralFirst())
}

// FreeAddr returns a loopback address with a port that was free a moment
// ago (FreePort's).
func FreeAddr(t testing.TB) string {
	t.Helper()
	lo := netip.MustParseAddr("127.0.0.1")
	return netip.AddrPortFrom(lo, uint16(FreePort(t, lo))).String()
}

// ephemeralFirst is the first port of the kernel's ephemeral range.
func ephemeralFirst() int {
	b, err := os.ReadFile(rangeFile)
	if err != nil {
		return defaultFirst
	}
	first, err := strconv.Atoi(strings.Fields(string(b) + " x")[0])
	if err != nil {
		return defaultFirst
	}
	return first
}

// freePort picks ports of [lowestPort, first) at random until one binds
// on addr; when the range leaves no room below it, the kernel picks.
func freePort(addr netip.Addr, first int) (int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 200 {
		port := 0
		if first-lowestPort > 1000 {
			port = lowestPort + rand.IntN(first-lowestPort)
		}
		l, err := net.Listen("tcp", netip.AddrPortFrom(addr, uint16(port)).String())
		if err != nil {
			if port == 0 {
				return 0, fmt.Errorf("finding a free port on %s: %w", addr, err)
			}
			continue
		}
		got := netip.AddrPortFrom(addr, uint16(l.Addr().(*net.TCPAddr).Port))
		l.Close()
		if !handedOut.ports[got] {
			handedOut.ports[got] = true
			return int(got.Port()), nil
		}
	}
	return 0, fmt.Errorf("finding a free port on %s: 200 tries below port %d all taken", addr, first)
}
