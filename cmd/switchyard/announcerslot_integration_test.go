//go:build integration

package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchyard-lb/switchyard/announcers/cloud/cloudtest"
	"github.com/switchyard-lb/switchyard/core/lbipam"
	"github.com/switchyard-lb/switchyard/test/apitest"
)

// TestIntegrationAnnouncersReload changes a running daemon's announcer
// through config reloads: adding a pool to its pools makes it announce
// an address of that pool, and a node selector the node does not match
// makes it release the address, both without a restart; a change of the
// cloud settings is left for the next restart and says so.
func TestIntegrationAnnouncersReload(t *testing.T) {
	srv := apitest.Start(t)
	ns := srv.Namespace(t)
	ctx := t.Context()
	client := srv.Client
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: lbipam.DefaultLeaseNamespace},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	provider := cloudtest.New("")
	defer provider.Close()
	setNodeReady(t, client, "node-a", "127.0.0.1", true)
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
	d := &lbDaemon{node: "node-a", tc: tc, done: make(chan error, 1)}
	runCtx, cancel := context.WithCancel(ctx)
	d.cancel = cancel
	go func() {
		d.done <- run(runCtx, []string{"--config", tc.path, "--kubeconfig", srv.Kubeconfig,
			"--hostname-override", "node-a", "--log-format", "text"}, &d.logs, &d.logs)
	}()
	defer func() {
		if t.Failed() {
			t.Logf("logs:\n%s", d.logs.String())
		}
		d.stop(t)
	}()
	// Using the client while run sets up klog races on klog's globals.
	poll(t, 30*time.Second, func() error {
		if _, ok := d.metric("switchyard_membership_members "); !ok {
			return fmt.Errorf("daemon not serving metrics yet")
		}
		return nil
	})

	svc := testService(ns, "web", "")
	svc.Annotations = map[string]string{"switchyard.dev/address-pool": "extra"}
	svc.Spec.Type = corev1.ServiceTypeLoadBalancer
	svc.Spec.ClusterIP, svc.Spec.ClusterIPs = "", nil
	svc.Spec.Ports[0].NodePort = 0
	if _, err := client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var ip string
	poll(t, 60*time.Second, func() error {
		s, err := client.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(s.Status.LoadBalancer.Ingress) != 1 {
			return fmt.Errorf("ingress = %+v, want one address", s.Status.LoadBalancer.Ingress)
		}
		ip = s.Status.LoadBalancer.Ingress[0].IP
		return nil
	})
	if !strings.HasPrefix(ip, "198.51.100.") {
		t.Fatalf("allocated %s, want an address of the extra pool", ip)
	}

	// The announcer serves only "public": the reload adds "extra".
	tc.write(t, configWith("    pools: [public, extra]\n"))
	poll(t, 30*time.Second, func() error {
		if a, ok := provider.Addresses()[ip]; !ok || a.Owner != "node-a" {
			return fmt.Errorf("provider serves %v, want %s from node-a", provider.Addresses(), ip)
		}
		return nil
	})
	// A node selector node-a does not match: it stops announcing.
	tc.write(t, configWith("    pools: [public, extra]\n    nodeSelector: {edge: \"true\"}\n"))
	poll(t, 30*time.Second, func() error {
		if a, ok := provider.Addresses()[ip]; ok {
			return fmt.Errorf("provider still serves %+v", a)
		}
		return nil
	})
	if l := d.logs.String(); !strings.Contains(l, "applied=announcers") || strings.Contains(l, "fields=announcers") {
		t.Errorf("the announcers were not reloaded live")
	}

	// The cloud settings need a restart: the reload says so.
	tc.write(t, strings.Replace(configWith("    pools: [public, extra]\n"), "cloud: {url:", "cloud: {timeout: 3s, url:", 1))
	poll(t, 30*time.Second, func() error {
		l := d.logs.String()
		if !strings.Contains(l, "announcers not reloaded") || !strings.Contains(l, "settings beyond pools and nodeSelector changed") || !strings.Contains(l, "fields=announcers") {
			return fmt.Errorf("no warning that the announcers need a restart")
		}
		return nil
	})
}
