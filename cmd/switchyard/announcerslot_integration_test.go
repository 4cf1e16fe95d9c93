//go:build integration

package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/switchyard-lb/switchyard/announcers/cloud/cloudtest"
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

// TestIntegrationAnnounceFailedEvent runs one daemon whose cloud provider
// fails the first ensures of a Service's address: the Service gets one
// AnnounceFailed warning Event naming the announcer and the address,
// not one per failed call, and the address is ensured once the provider
// recovers.
func TestIntegrationAnnounceFailedEvent(t *testing.T) {
	srv, ns, provider := startCloudNode(t)
	ctx, client := t.Context(), srv.Client
	const failures = 3
	for range failures {
		provider.FailNext(cloudtest.Fault{Method: "PUT", Status: 503})
	}
	tc := writeTestConfig(t, fmt.Sprintf(`pools:
  - name: public
    addresses: [192.0.2.0/28]
announcers:
  - name: provider
    type: cloud
    cloud: {url: %q}
membership:
  bindAddress: 127.0.0.1
  port: %d
`, provider.URL, freeGossipPort(t)))
	d := startMain(t, srv.Kubeconfig, "node-a", tc)
	defer d.finish(t)
	d.waitServing(t)
	if _, err := client.CoreV1().Services(ns).Create(ctx, lbService(ns, "web"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var ip string
	poll(t, 60*time.Second, func() error {
		for addr, st := range provider.Addresses() {
			if len(st.Services) > 0 && st.Services[0] == ns+"/web" {
				ip = addr
				return nil
			}
		}
		return fmt.Errorf("provider serves %v, want the Service's address after %d failures", provider.Addresses(), failures)
	})
	failed := 0
	for _, r := range provider.Requests() {
		if r.Method == "PUT" && r.Status == 503 {
			failed++
		}
	}
	if failed != failures {
		t.Fatalf("provider answered %d PUTs with 503, want %d", failed, failures)
	}

	sel := fields.Set{"involvedObject.name": "web", "reason": "AnnounceFailed"}.AsSelector().String()
	var events []corev1.Event
	poll(t, 30*time.Second, func() error {
		l, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			return err
		}
		if len(l.Items) == 0 {
			return fmt.Errorf("no AnnounceFailed Event on the Service")
		}
		events = l.Items
		return nil
	})
	// The recorder writes asynchronously and nothing signals that it is
	// idle: give late duplicates (which would raise the count or add
	// Events) two more seconds to show.
	time.Sleep(2 * time.Second)
	l, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	events = l.Items
	if len(events) != 1 || events[0].Count > 1 {
		t.Fatalf("AnnounceFailed Events = %+v, want one with count 1 for %d failed calls", events, failures)
	}
	e := events[0]
	want := "announcer provider failed to announce " + ip + ": "
	if e.Type != corev1.EventTypeWarning || !strings.HasPrefix(e.Message, want) || e.Source.Component != "switchyard" {
		t.Errorf("Event = %s %q from %+v, want a Warning starting %q from switchyard", e.Type, e.Message, e.Source, want)
	}
}
