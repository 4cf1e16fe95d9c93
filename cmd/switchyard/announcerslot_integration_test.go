//go:build integration

package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestIntegrationAnnouncersReload changes a running daemon's announcer
// through config reloads: adding a pool to its pools makes it announce
// an address of that pool, and a node selector the node does not match
// makes it release the address, both without a restart; a change of the
// cloud settings is left for the next restart and says so.
func TestIntegrationAnnouncersReload(t *testing.T) {
	srv, ns, provider := startCloudNode(t)
	ctx, client := t.Context(), srv.Client
	port := freeGossipPort(t)
	configWith := func(announcer string) string {
		return fmt.Sprintf(`pools:
  - name: public
    addresses: [192.0.2.0/28]
  - name: extra
    addresses: [198.51.100.0/28]
announcers:
  - name: provider
    type: cloud
%s    cloud: {url: %q}
membership:
  bindAddress: 127.0.0.1
  port: %d
`, announcer, provider.URL, port)
	}
	tc := writeTestConfig(t, configWith("    pools: [public]\n"))
	d := startMain(t, srv.Kubeconfig, "node-a", tc)
	defer d.finish(t)
	d.waitServing(t)

	svc := lbService(ns, "web")
	svc.Annotations = map[string]string{"switchyard.dev/address-pool": "extra"}
	if _, err := client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ip := waitIngress(t, client, ns, "web")
	if !strings.HasPrefix(ip, "198.51.100.") {
		t.Fatalf("allocated %s, want an address of the extra pool", ip)
	}

	// The announcer serves only "public": the reload adds "extra".
	tc.Write(t, configWith("    pools: [public, extra]\n"))
	poll(t, 30*time.Second, func() error {
		if a, ok := provider.Addresses()[ip]; !ok || a.Owner != "node-a" {
			return fmt.Errorf("provider serves %v, want %s from node-a", provider.Addresses(), ip)
		}
		return nil
	})
	// A node selector node-a does not match: it stops announcing.
	tc.Write(t, configWith("    pools: [public, extra]\n    nodeSelector: {edge: \"true\"}\n"))
	waitReleased(t, provider, ip)
	if l := d.Logs.String(); !strings.Contains(l, "applied=announcers") || strings.Contains(l, "fields=announcers") {
		t.Errorf("the announcers were not reloaded live")
	}

	// The cloud settings need a restart: the reload says so.
	tc.Write(t, strings.Replace(configWith("    pools: [public, extra]\n"), "cloud: {url:", "cloud: {timeout: 3s, url:", 1))
	poll(t, 30*time.Second, func() error {
		l := d.Logs.String()
		if !strings.Contains(l, "announcers not reloaded") || !strings.Contains(l, "settings beyond pools and nodeSelector changed") || !strings.Contains(l, "fields=announcers") {
			return fmt.Errorf("no warning that the announcers need a restart")
		}
		return nil
	})
}
