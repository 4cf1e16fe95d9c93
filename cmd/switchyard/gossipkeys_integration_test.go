//go:build integration

package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchyard-lb/switchyard/announcers/cloud/cloudtest"
	"github.com/switchyard-lb/switchyard/core/membership"
)

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
