package cluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"syscall"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/switchyard-lb/switchyard/test/netns"
)

// Namespace is one network namespace of the topology: a node, a pod, the
// router or the client. It is unnamed (no /run/netns entry) and lives as
// long as its handle.
type Namespace struct {
	Name string
	ns   *netns.Unnamed
}

// newNamespace creates a namespace with lo up.
func newNamespace(name string) (*Namespace, error) {
	u, err := netns.NewUnnamed(name)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	ns := &Namespace{Name: name, ns: u}
	if err := ns.configure(func(h *netlink.Handle) error { return linkUp(h, "lo") }); err != nil {
		ns.close()
		return nil, err
	}
	return ns, nil
}

// Do runs fn on an OS thread inside the namespace. Sockets fn creates
// belong to the namespace and stay usable from any goroutine afterwards;
// goroutines fn starts do not run in it. The thread is discarded after fn
// (kernel-lab.md pitfall 5).
func (ns *Namespace) Do(fn func() error) error { return ns.ns.Do(fn) }

// DialContext connects from inside the namespace.
func (ns *Namespace) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return ns.ns.DialContext(ctx, network, addr)
}

// Listen opens a listener inside the namespace.
func (ns *Namespace) Listen(network, addr string) (net.Listener, error) {
	ln, err := ns.ns.Listen(network, addr)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	return ln, nil
}

// Command starts cmd with its process inside the namespace: it is forked
// from a thread that joined it.
func (ns *Namespace) Command(cmd *exec.Cmd) error {
	return ns.Do(func() error {
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("cluster: start %s in %s: %w", cmd.Path, ns.Name, err)
		}
		return nil
	})
}

// Sysctl writes a /proc/sys/net entry of the namespace (the net/ tree
// belongs to the namespace of the thread that opens it), path relative to
// /proc/sys ("net/ipv4/ip_forward").
func (ns *Namespace) Sysctl(path, value string) error {
	return ns.Do(func() error {
		if err := os.WriteFile("/proc/sys/"+path, []byte(value), 0o644); err != nil {
			return fmt.Errorf("cluster: sysctl %s=%s in %s: %w", path, value, ns.Name, err)
		}
		return nil
	})
}

// configure runs fn with a route-netlink handle in the namespace. Only
// NETLINK_ROUTE: the default set includes XFRM, which the guest lacks
// (kernel-lab.md pitfall 4).
func (ns *Namespace) configure(fn func(h *netlink.Handle) error) error {
	h, err := netlink.NewHandleAt(ns.ns.Handle(), unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("cluster: netlink in %s: %w", ns.Name, err)
	}
	defer h.Close()
	if err := fn(h); err != nil {
		return fmt.Errorf("cluster: %s: %w", ns.Name, err)
	}
	return nil
}

func (ns *Namespace) close() { ns.ns.Close() }

// forward makes target, a TCP address reachable from the test process's
// own namespace, reachable inside ns at listen: every connection accepted
// there is spliced to a new connection to target. Closing the returned
// Closer closes the listener and every open connection.
func (ns *Namespace) forward(listen, target string) (io.Closer, error) {
	ln, err := ns.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	return netns.ForwardListener(ln, target), nil
}

// killGroup SIGKILLs a process group.
func killGroup(pid int) { _ = syscall.Kill(-pid, syscall.SIGKILL) }
