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
	var ln net.Listener
	err := n.Do(func() error {
		var err error
		ln, err = net.Listen(network, addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listening on %s %s in netns %s: %w", network, addr, n.name, err)
	}
	return ln, nil
}

// DialContext connects from inside the namespace: a net.Dialer's
// DialContext for http.Transport, so a test can reach a server that
// listens on the namespace's loopback.
func (n *NS) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := n.Do(func() error {
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
	var (
		mu     sync.Mutex
		conns  = map[net.Conn]struct{}{}
		closed bool
		wg     sync.WaitGroup
	)
	track := func(cs ...net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		if closed {
			return false
		}
		for _, c := range cs {
			conns[c] = struct{}{}
		}
		return true
	}
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		closed = true
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
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
			if !track(in, out) {
				in.Close()
				out.Close()
				return
			}
			wg.Go(func() { splice(in, out) })
		}
	})
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
