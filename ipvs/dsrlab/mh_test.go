//go:build linux

package dsrlab

import (
	"bufio"
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/ipvs"
)

// TestIPVSMHTableDependsOnOrder checks the kernel fact the choice between
// ip_vs_mh and our own Maglev table rests on: two namespaces holding the
// same mh service (mh-port) with the same ten real servers added in the
// same order pick the same real server for each of 200 flows; added in the
// reverse order, they disagree on some (logged: the kernel's table
// follows the order of its list, which its API does not expose).
func TestIPVSMHTableDependsOnOrder(t *testing.T) {
	requireGuest(t)
	const flows = 200
	var dests []netip.Addr
	for i := 1; i <= 10; i++ {
		dests = append(dests, netip.AddrFrom4([4]byte{10, 9, 1, byte(i)}))
	}
	reversed := slices.Clone(dests)
	slices.Reverse(reversed)
	a := mhPicks(t, "mh-a", dests, flows)
	for _, tc := range []struct {
		name  string
		order []netip.Addr
	}{{"same order", dests}, {"reverse order", reversed}} {
		b := mhPicks(t, "mh-b-"+strings.ReplaceAll(tc.name, " ", "-"), tc.order, flows)
		differ := 0
		for port, d := range a {
			if b[port] != d {
				differ++
			}
		}
		t.Logf("ip_vs_mh %s: %d of %d flows picked another real server", tc.name, differ, flows)
		if tc.name == "same order" && differ != 0 {
			t.Errorf("same destinations in the same order: %d of %d flows differ", differ, flows)
		}
	}
}

// mhPicks builds a namespace with an mh service over dests, added in that
// order, opens flows from fixed source ports and returns the real server
// IPVS chose for each port.
func mhPicks(t *testing.T, name string, dests []netip.Addr, flows int) map[int]string {
	t.Helper()
	ns := newNS(t, name)
	mhVIP := netip.MustParseAddr("10.96.0.1")
	withNetlink(t, ns, func(h *netlink.Handle) error {
		if err := configure(h, "lo"); err != nil {
			return err
		}
		// The real servers are on a dummy link: their SYNs vanish, and
		// each flow's choice stays in the connection table.
		if err := h.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: "d0"}}); err != nil {
			return err
		}
		return configure(h, "d0", netip.MustParsePrefix("10.9.0.1/16"), netip.PrefixFrom(mhVIP, 32))
	})
	do(t, ns, func() error {
		k, err := ipvs.NewNetlink()
		if err != nil {
			return err
		}
		defer k.Close()
		key := model.VirtualServiceKey{Addr: mhVIP, Port: 80, Protocol: model.TCP}
		if err := k.AddService(ipvs.Service{VirtualServiceKey: key, Scheduler: "mh", Flags: ipvs.FlagSchedOpt2}); err != nil {
			return err
		}
		for _, d := range dests {
			if err := k.AddDestination(key, ipvs.Destination{DestinationKey: ipvs.DestinationKey{Addr: d, Port: 80}, Weight: 1}); err != nil {
				return err
			}
		}
		// Non-blocking connects: each sends its SYN in connect(2)
		// whatever the guest's load, and stays open until the table is
		// read.
		dst := &unix.SockaddrInet4{Port: 80, Addr: mhVIP.As4()}
		for i := range flows {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			t.Cleanup(func() { unix.Close(fd) })
			if err := unix.Bind(fd, &unix.SockaddrInet4{Port: 30000 + i}); err != nil {
				return fmt.Errorf("bind port %d: %w", 30000+i, err)
			}
			if err := unix.Connect(fd, dst); err != nil && err != unix.EINPROGRESS {
				return fmt.Errorf("connect from port %d: %w", 30000+i, err)
			}
		}
		return nil
	})
	picks := map[int]string{}
	do(t, ns, func() error {
		// thread-self: /proc/net is the main thread's namespace
		// (kernel-lab.md pitfall 5).
		b, err := os.ReadFile("/proc/thread-self/net/ip_vs_conn")
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 7 || f[0] != "TCP" {
				continue
			}
			port, err := strconv.ParseUint(f[2], 16, 16)
			if err != nil {
				return err
			}
			picks[int(port)] = f[5]
		}
		return nil
	})
	if len(picks) != flows {
		t.Fatalf("%s: %d connections in the table, want %d", name, len(picks), flows)
	}
	return picks
}
