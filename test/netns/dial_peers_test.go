//go:build peers

package netns_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-lb/switchyard/test/netns"
)

// TestPeersNetnsForward: a server on the host's loopback is reachable at
// the same address inside a namespace through Forward, from a process
// running there (nc) and from DialContext; closing it at cleanup ends the
// open connections.
func TestPeersNetnsForward(t *testing.T) {
	netns.Require(t)
	host, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	go func() {
		for {
			c, err := host.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				_, _ = io.WriteString(c, "echo "+line)
			}()
		}
	}()
	addr := host.Addr().String()

	var open net.Conn
	t.Run("forward", func(t *testing.T) {
		n := netns.New(t, "fwd")
		n.Forward(t, addr, addr)
		// Without Forward nothing listens on the namespace's loopback.
		other := netns.New(t, "nofwd")
		if c, err := other.DialContext(context.Background(), "tcp", addr); err == nil {
			c.Close()
			t.Fatalf("dialled %s in a namespace without Forward", addr)
		}

		c, err := n.DialContext(context.Background(), "tcp", addr)
		if err != nil {
			t.Fatalf("DialContext %s inside the namespace: %v", addr, err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "hello\n"); err != nil {
			t.Fatal(err)
		}
		got, err := bufio.NewReader(c).ReadString('\n')
		if err != nil || got != "echo hello\n" {
			t.Fatalf("answer through the forward = %q, %v; want %q", got, err, "echo hello\n")
		}
		c.Close()

		// A second connection stays open over the cleanup.
		open, err = n.DialContext(context.Background(), "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
	})
	_ = open.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := open.Read(make([]byte, 1)); err == nil || strings.Contains(err.Error(), "timeout") {
		t.Errorf("connection through the forward after cleanup: read error %v, want it closed", err)
	}
	open.Close()
}
