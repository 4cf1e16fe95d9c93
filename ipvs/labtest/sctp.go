//go:build linux

package labtest

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// SCTPPort is the port the backends serve SCTP on, when the kernel has
// SCTP.
const SCTPPort = 9132

// ErrNoSCTP means the kernel offers no SCTP sockets.
var ErrNoSCTP = errors.New("the kernel has no SCTP")

// serveSCTP starts an SCTP one-to-one server on the wildcard IPv6 address
// (dual-stack) in the backend's namespace that writes the backend's name
// to every association and closes it. Go's net package has no SCTP, so it
// uses sockets directly. It returns ErrNoSCTP when the kernel has none.
func (be *Backend) serveSCTP() error {
	var fd int
	err := be.NS.Do(func() error {
		var err error
		fd, err = unix.Socket(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_SCTP)
		if errors.Is(err, unix.EPROTONOSUPPORT) || errors.Is(err, unix.ESOCKTNOSUPPORT) {
			return ErrNoSCTP
		}
		if err != nil {
			return fmt.Errorf("%s: sctp socket: %w", be.Name, err)
		}
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0); err != nil {
			unix.Close(fd)
			return fmt.Errorf("%s: sctp dual-stack: %w", be.Name, err)
		}
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
		if err := unix.Bind(fd, &unix.SockaddrInet6{Port: SCTPPort}); err != nil {
			unix.Close(fd)
			return fmt.Errorf("%s: sctp bind: %w", be.Name, err)
		}
		if err := unix.Listen(fd, 64); err != nil {
			unix.Close(fd)
			return fmt.Errorf("%s: sctp listen: %w", be.Name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	go func() {
		for {
			nfd, _, err := unix.Accept4(fd, unix.SOCK_CLOEXEC)
			if errors.Is(err, unix.EINTR) || errors.Is(err, unix.ECONNABORTED) {
				continue
			}
			if err != nil {
				return // closed
			}
			// Each association on its own goroutine: one a test holds
			// open does not hold up the next.
			go func() {
				unix.Write(nfd, []byte(be.Name))
				// Wait for the client's shutdown, so the data is not
				// lost to an abort. The client ends the association; the
				// timeout only ends one a failed test left open.
				unix.SetsockoptTimeval(nfd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: int64(answerTimeout / time.Second)})
				// The runtime's signals interrupt a read with a timeout
				// (EINTR, signal(7)); only data, the client's shutdown or
				// the timeout end it.
				buf := make([]byte, 16)
				for {
					if _, err := unix.Read(nfd, buf); !errors.Is(err, unix.EINTR) {
						break
					}
				}
				unix.Close(nfd)
			}()
		}
	}()
	be.stop = append(be.stop, closerFunc(func() error {
		// Shutdown wakes the blocked accept; Close alone does not.
		unix.Shutdown(fd, unix.SHUT_RDWR)
		return unix.Close(fd)
	}))
	return nil
}

type closerFunc func() error

func (c closerFunc) Close() error { return c() }

// SplitSCTP opens n SCTP associations from namespace from to target, each
// from its own source port, and counts the answers per backend name.
func SplitSCTP(from *Namespace, target netip.AddrPort, n int) (map[string]int, error) {
	return splitAsk(from, n, "association", "sctp/"+target.String(), func(port int) (string, error) {
		return sctpAsk(port, target)
	})
}

// sctpAsk connects from srcPort, reads the backend's name and ends the
// association.
func sctpAsk(srcPort int, target netip.AddrPort) (string, error) {
	fd, name, err := connectSCTP(srcPort, target)
	if err != nil {
		return "", err
	}
	unix.Shutdown(fd, unix.SHUT_WR)
	unix.Close(fd)
	return name, nil
}

// connectSCTP connects from srcPort and reads the backend's name, leaving
// the association open. The socket is non-blocking and waited on with
// poll, as the Go runtime's signals interrupt blocking calls (EINTR).
func connectSCTP(srcPort int, target netip.AddrPort) (_ int, _ string, err error) {
	var (
		family        = unix.AF_INET
		local, remote unix.Sockaddr
	)
	if target.Addr().Is4() {
		local, remote = &unix.SockaddrInet4{Port: srcPort}, &unix.SockaddrInet4{Port: int(target.Port()), Addr: target.Addr().As4()}
	} else {
		family = unix.AF_INET6
		local, remote = &unix.SockaddrInet6{Port: srcPort}, &unix.SockaddrInet6{Port: int(target.Port()), Addr: target.Addr().As16()}
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.IPPROTO_SCTP)
	if err != nil {
		return -1, "", fmt.Errorf("socket: %w", err)
	}
	defer func() {
		if err != nil {
			unix.Close(fd)
		}
	}()
	if err := unix.Bind(fd, local); err != nil {
		return -1, "", fmt.Errorf("bind: %w", err)
	}
	deadline := time.Now().Add(answerTimeout)
	if err := unix.Connect(fd, remote); err != nil && !errors.Is(err, unix.EINPROGRESS) {
		return -1, "", fmt.Errorf("connect: %w", err)
	}
	if err := waitFD(fd, unix.POLLOUT, deadline); err != nil {
		return -1, "", fmt.Errorf("connect: %w", err)
	}
	if soErr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR); err != nil || soErr != 0 {
		return -1, "", fmt.Errorf("connect: %w", errors.Join(err, unix.Errno(soErr)))
	}
	buf := make([]byte, 64)
	for {
		if err := waitFD(fd, unix.POLLIN, deadline); err != nil {
			return -1, "", fmt.Errorf("read: %w", err)
		}
		n, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return -1, "", fmt.Errorf("read: %w", err)
		}
		return fd, strings.TrimSpace(string(buf[:n])), nil
	}
}

// waitFD polls fd for events until deadline, retrying on EINTR.
func waitFD(fd int, events int16, deadline time.Time) error {
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return errors.New("timed out")
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: events}}
		n, err := unix.Poll(fds, int(left.Milliseconds())+1)
		if errors.Is(err, unix.EINTR) || (err == nil && n == 0) {
			continue
		}
		if err != nil {
			return fmt.Errorf("poll: %w", err)
		}
		return nil
	}
}
