package bgp

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// dropConnections shuts down, in both directions, every TCP connection
// of this process between a local port in local (0: any) and a remote
// address and port in remote: the kernel sends the peer a FIN with
// nothing before it, and GoBGP's session with it ends as when the peer
// closes (its read fails), without a NOTIFICATION. GoBGP keeps no
// handle to offer for this; the connections are found among the
// process's file descriptors. The descriptors stay open, for their
// owners to close. It returns how many connections it shut down.
func dropConnections(remote map[netip.AddrPort]bool, remoteAddrs map[netip.Addr]bool, local uint16) (int, error) {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, fmt.Errorf("listing file descriptors: %w", err)
	}
	n := 0
	var errs []error
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if link, err := os.Readlink("/proc/self/fd/" + e.Name()); err != nil || !strings.HasPrefix(link, "socket:") {
			continue
		}
		if proto, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PROTOCOL); err != nil || proto != unix.IPPROTO_TCP {
			continue
		}
		peer, err := unix.Getpeername(fd)
		if err != nil {
			continue // not connected
		}
		ra := sockaddr(peer)
		match := remote[ra]
		if !match && local != 0 && remoteAddrs[ra.Addr()] {
			if self, err := unix.Getsockname(fd); err == nil && sockaddr(self).Port() == local {
				match = true // a session the peer opened
			}
		}
		if !match {
			continue
		}
		if err := unix.Shutdown(fd, unix.SHUT_RDWR); err != nil {
			errs = append(errs, fmt.Errorf("shutting down the connection with %s: %w", ra, err))
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

func sockaddr(sa unix.Sockaddr) netip.AddrPort {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr).Unmap(), uint16(a.Port))
	}
	return netip.AddrPort{}
}
