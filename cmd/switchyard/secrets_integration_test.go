//go:build integration

package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchyard-lb/switchyard/announcers/cloud/cloudtest"
	"github.com/switchyard-lb/switchyard/core/membership"
)

// md5Router is a TCP listener standing in for a BGP router that wants a
// TCP MD5 signature (RFC 2385) from one source address: the kernel
// drops every SYN not signed with the key, so an accepted connection
// proves the speaker dialled with that key. It answers nothing.
type md5Router struct {
	ln       *net.TCPListener
	accepted chan net.Conn
}

func newMD5Router(t *testing.T, addr string) *md5Router {
	t.Helper()
	lc := net.ListenConfig{}
	lc.SetMultipathTCP(false) // the kernel refuses TCP_MD5SIG on MPTCP sockets
	l, err := lc.Listen(t.Context(), "tcp4", addr+":0")
	if err != nil {
		t.Fatal(err)
	}
	r := &md5Router{ln: l.(*net.TCPListener), accepted: make(chan net.Conn, 16)}
	t.Cleanup(func() { r.ln.Close() })
	go func() {
		for {
			c, err := r.ln.Accept()
			if err != nil {
				close(r.accepted)
				return
			}
			t.Cleanup(func() { c.Close() })
			r.accepted <- c
		}
	}()
	return r
}

func (r *md5Router) port() int { return r.ln.Addr().(*net.TCPAddr).Port }

// setKey makes the listener want key on connections from peer.
func (r *md5Router) setKey(t *testing.T, peer netip.Addr, key string) {
	t.Helper()
	sig := unix.TCPMD5Sig{Keylen: uint16(len(key))}
	sig.Addr.Family = unix.AF_INET
	a := peer.As4()
	copy(sig.Addr.Data[2:], a[:])
	copy(sig.Key[:], key)
	rc, err := r.ln.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptTCPMD5Sig(int(fd), unix.IPPROTO_TCP, unix.TCP_MD5SIG, &sig) }); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Skipf("TCP_MD5SIG unavailable here: %v", serr)
	}
}

// waitAccept waits for a connection the router accepts.
func (r *md5Router) waitAccept(t *testing.T, what string) {
	t.Helper()
	select {
	case _, ok := <-r.accepted:
		if !ok {
			t.Fatalf("%s: listener closed", what)
		}
	case <-time.After(45 * time.Second):
		t.Fatalf("%s: no connection within 45s", what)
	}
}

func (r *md5Router) drain() {
	for {
		select {
		case <-r.accepted:
		default:
			return
		}
	}
}

// TestIntegrationBGPPasswordSecret runs the daemon with a BGP announcer
// and two peers: "plain" without a password, and "signed" whose TCP MD5
// password is a key of a Secret in the daemon's namespace. The Secret is
// missing at start: the error names it, the plain peer comes up anyway
// and the signed one waits; with no session established past the hold
// time, /readyz fails naming both. Creating the Secret brings the signed
// peer up with the key; rotating it (router and Secret) re-creates the
// session with the new key.
func TestIntegrationBGPPasswordSecret(t *testing.T) {
	srv, ns := startInPodNamespace(t)
	ctx := t.Context()
	client := srv.Client
	setNodeReady(t, client, "node-a", "127.0.0.1", true)

	// The speaker dials from 127.0.0.1, the source the kernel picks
	// towards 127.0.0.0/8.
	node := netip.MustParseAddr("127.0.0.1")
	plain := newMD5Router(t, "127.0.31.1")
	signed := newMD5Router(t, "127.0.31.2")
	signed.setKey(t, node, "first")

	tc := writeTestConfig(t, fmt.Sprintf(`announcers:
  - name: tor
    type: bgp
    bgp:
      asn: 64512
      routerID: 10.0.0.11
      peers:
        - {address: 127.0.31.1, asn: 64513, port: %d, holdTime: 3s, keepaliveTime: 1s}
        - address: 127.0.31.2
          asn: 64513
          port: %d
          holdTime: 3s
          keepaliveTime: 1s
          passwordSecret: {name: bgp-auth, key: password}
membership:
  bindAddress: 127.0.0.1
  port: %d
`, plain.port(), signed.port(), freeGossipPort(t)))
	d := startMain(t, srv.Kubeconfig, "node-a", tc)
	defer d.finish(t)
	logs := d.Logs

	plain.waitAccept(t, "the peer without a password while the other's Secret is missing")
	poll(t, 10*time.Second, func() error {
		if l := logs.String(); !strings.Contains(l, "Secret switchyard-system/bgp-auth not found") {
			return fmt.Errorf("no error naming the missing Secret in the logs")
		}
		return nil
	})

	// No session is ever established (the routers only accept): past
	// the hold time, /readyz says so, with the missing Secret as a
	// reason.
	poll(t, 30*time.Second, func() error {
		code, body, err := httpGet("http://" + tc.Health + "/readyz")
		if err != nil {
			return err
		}
		for _, want := range []string{"announcer tor", "no bgp session established (2 peers configured)", "Secret switchyard-system/bgp-auth not found"} {
			if code != 503 || !strings.Contains(body, want) {
				return fmt.Errorf("/readyz = %d %q, want 503 saying %q", code, body, want)
			}
		}
		return nil
	})

	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bgp-auth", Namespace: ns},
		Data:       map[string][]byte{"password": []byte("first\n")},
	}
	if _, err := client.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	signed.waitAccept(t, "the signed peer after its Secret appeared")

	// Rotation: the router wants the new key from now on (the session
	// accepted above stays open, so the speaker has no reason to dial
	// again unless its password changes).
	signed.setKey(t, node, "second")
	signed.drain()
	secret.Data["password"] = []byte("second")
	if _, err := client.CoreV1().Secrets(ns).Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	signed.waitAccept(t, "the signed peer after the Secret's password changed")

	// A key the Secret lacks is an error naming it; the peer keeps its
	// last password.
	secret.Data = map[string][]byte{"other": []byte("x")}
	if _, err := client.CoreV1().Secrets(ns).Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, 30*time.Second, func() error {
		if l := logs.String(); !strings.Contains(l, `Secret switchyard-system/bgp-auth has no key \"password\"`) {
			return fmt.Errorf("no error naming the missing key in the logs")
		}
		return nil
	})
}

// TestIntegrationGossipKeySecret runs daemons whose gossip is encrypted
// with keys from a Secret: without the Secret, or with a key of the wrong
// length, a daemon refuses to start and says why; with it, a member with
// the same key joins the daemon and one with another key is refused.
func TestIntegrationGossipKeySecret(t *testing.T) {
	srv, ns := startInPodNamespace(t)
	ctx := t.Context()
	client := srv.Client
	provider := cloudtest.New("")
	defer provider.Close()
	addrs := map[string]string{"node-a": "127.0.0.1", "node-b": "127.0.0.2"}
	for node, addr := range addrs {
		setNodeReady(t, client, node, addr, true)
	}
	port := freeGossipPort(t)
	configFor := func(node string) *testConfig {
		return writeTestConfig(t, fmt.Sprintf(`pools:
  - name: public
    addresses: [192.0.2.0/28]
announcers:
  - name: provider
    type: cloud
    cloud: {url: %q}
membership:
  bindAddress: %s
  port: %d
  secretKeySecret: {name: gossip, key: keys}
`, provider.URL, addrs[node], port))
	}
	runOnce := func(node string) error {
		var logs syncBuffer
		runCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return run(runCtx, []string{"--config", configFor(node).Path, "--kubeconfig", srv.Kubeconfig,
			"--hostname-override", node, "--log-format", "text"}, &logs, &logs)
	}

	if err := runOnce("node-a"); err == nil || !strings.Contains(err.Error(), "Secret switchyard-system/gossip not found") {
		t.Fatalf("run without the key Secret = %v, want an error naming it", err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "gossip", Namespace: ns},
		Data:       map[string][]byte{"keys": []byte(base64.StdEncoding.EncodeToString([]byte("short")) + "\n")},
	}
	if _, err := client.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := runOnce("node-a"); err == nil || !strings.Contains(err.Error(), "key is 5 bytes, want 16, 24 or 32") {
		t.Fatalf("run with a 5-byte key = %v, want an error saying so", err)
	}

	key := []byte("0123456789abcdef0123456789abcdef")
	secret.Data["keys"] = []byte(base64.StdEncoding.EncodeToString(key))
	if _, err := client.CoreV1().Secrets(ns).Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	d := startMain(t, srv.Kubeconfig, "node-a", configFor("node-a"))
	defer d.finish(t)

	// node-b is a bare gossip member in the test (a second daemon in
	// this process would race with the first on klog's globals): with
	// the Secret's key it joins the daemon, with another key it is
	// refused.
	member := func(node, addr string, key []byte) *membership.Membership {
		m, err := membership.New(membership.Config{NodeName: node, BindAddr: addr, BindPort: -1, Keys: [][]byte{key}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Close(context.Background()) })
		go m.Run(d.Context())
		m.SetPeers([]membership.Peer{{Name: "node-a", Addr: fmt.Sprintf("127.0.0.1:%d", port)}})
		return m
	}
	b := member("node-b", addrs["node-b"], key)
	poll(t, 30*time.Second, func() error {
		if v, _ := d.metric("switchyard_membership_members "); v != 2 || b.Size() != 2 {
			return fmt.Errorf("daemon counts %v members and node-b %d, want 2 each", v, b.Size())
		}
		return nil
	})
	stranger := member("node-c", "127.0.0.3", []byte("fedcba9876543210fedcba9876543210"))
	poll(t, 30*time.Second, func() error {
		if stranger.JoinErr() == nil {
			return fmt.Errorf("a member with another key has not failed to join")
		}
		return nil
	})
	if alive, known := b.Alive("node-c"); known || alive {
		t.Errorf("node-b learnt of the member with another key (alive %v)", alive)
	}
}
