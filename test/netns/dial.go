package netns

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
)

// Listen opens a listener inside the namespace. The socket stays there:
// Accept may be called from any goroutine.
func (n *NS) Listen(network, addr string) (net.Listener, error) {
	return listenIn(n.Do, "netns "+n.name, network, addr)
}

// DialContext connects from inside the namespace: a net.Dialer's
// DialContext for http.Transport, so a test can reach a server that
// listens on the namespace's loopback.
func (n *NS) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return dialIn(n.Do, ctx, network, addr)
}

// listenIn opens a listener on a thread do runs inside a namespace; where
// names it in errors.
func listenIn(do func(func() error) error, where, network, addr string) (net.Listener, error) {
	var ln net.Listener
	err := do(func() error {
		var err error
		ln, err = net.Listen(network, addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listening on %s %s in %s: %w", network, addr, where, err)
	}
	return ln, nil
}

// dialIn connects from a thread do runs inside a namespace.
func dialIn(do func(func() error) error, ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := do(func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Forward makes target, a TCP address reachable from the test process's
// own namespace (the host's loopback, say), reachable inside n at listen:
// every connection accepted there is spliced to a new connection to
// target. Cleanup closes the listener and every open connection.
//
// It is how processes in a namespace reach a server bound to the host's
// loopback (the test API server) without any link into the host
// namespace: with listen equal to target, a kubeconfig naming
// https://127.0.0.1:PORT works unchanged inside n.
func (n *NS) Forward(t testing.TB, listen, target string) {
	t.Helper()
	ln, err := n.Listen("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	f := ForwardListener(ln, target)
	t.Cleanup(func() { f.Close() })
}

// ForwardListener splices every connection ln accepts to a new connection
// to target, dialed from the caller's own namespace: with ln opened inside
// a namespace (NS.Listen, Unnamed.Listen), target becomes reachable there.
// Closing the returned Closer closes ln and every open connection and
// waits for the copying to end.
func ForwardListener(ln net.Listener, target string) io.Closer {
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
	return f
}

type forwarder struct {
	ln     net.Listener
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]bool
	closed bool
}

// track records open connections, or closes them if f is closed already.
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
