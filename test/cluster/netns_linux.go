package cluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Namespace is one network namespace of the topology: a node, a pod, the
// router or the client. It is unnamed (no /run/netns entry) and lives as
// long as its handle.
type Namespace struct {
	Name   string
	handle netns.NsHandle
}

// newNamespace creates a namespace with lo up. The thread that made it is
// discarded, so no goroutine is left in it.
func newNamespace(name string) (*Namespace, error) {
	type result struct {
		h   netns.NsHandle
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		h, err := netns.New()
		ch <- result{h, err}
	}()
	r := <-ch
	if r.err != nil {
		return nil, fmt.Errorf("cluster: create namespace %s: %w", name, r.err)
	}
	ns := &Namespace{Name: name, handle: r.h}
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
func (ns *Namespace) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked, see above
		if err := netns.Set(ns.handle); err != nil {
			errc <- fmt.Errorf("cluster: enter namespace %s: %w", ns.Name, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// DialContext connects from inside the namespace.
func (ns *Namespace) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := ns.Do(func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Listen opens a listener inside the namespace.
func (ns *Namespace) Listen(network, addr string) (net.Listener, error) {
	var ln net.Listener
	err := ns.Do(func() error {
		var err error
		ln, err = net.Listen(network, addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: listen on %s %s in %s: %w", network, addr, ns.Name, err)
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
	h, err := netlink.NewHandleAt(ns.handle, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("cluster: netlink in %s: %w", ns.Name, err)
	}
	defer h.Close()
	if err := fn(h); err != nil {
		return fmt.Errorf("cluster: %s: %w", ns.Name, err)
	}
	return nil
}

func (ns *Namespace) close() {
	if ns.handle >= 0 {
		ns.handle.Close()
		ns.handle = -1
	}
}

// forward makes target, a TCP address reachable from the test process's
// own namespace, reachable inside ns at listen: every connection accepted
// there is spliced to a new connection to target. Closing the returned
// Closer closes the listener and every open connection.
func (ns *Namespace) forward(listen, target string) (io.Closer, error) {
	ln, err := ns.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	f := &forwarder{ln: ln, conns: map[net.Conn]bool{}}
	f.wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			if !f.track(in, out) {
				return
			}
			f.wg.Go(func() {
				splice(in, out)
				f.untrack(in, out)
			})
		}
	})
	return f, nil
}

type forwarder struct {
	ln     net.Listener
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]bool
	closed bool
}

func (f *forwarder) track(cs ...net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		f.conns[c] = true
	}
	return true
}

func (f *forwarder) untrack(cs ...net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range cs {
		delete(f.conns, c)
	}
}

func (f *forwarder) Close() error {
	f.ln.Close()
	f.mu.Lock()
	f.closed = true
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
	return nil
}

// splice copies both ways until either side ends, then closes both.
func splice(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	a.Close()
	b.Close()
	<-done
}

// killGroup SIGKILLs a process group.
func killGroup(pid int) { _ = syscall.Kill(-pid, syscall.SIGKILL) }
