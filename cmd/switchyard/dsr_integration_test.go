//go:build integration

package main

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/switchyard-lb/switchyard/core/k8s"
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/test/apitest"
	"github.com/switchyard-lb/switchyard/test/harness"
)

// TestIntegrationDSRWiring runs node-a's daemon against the real API
// server with a Service whose external IP is in dsr mode by its
// annotation and endpoints on node-a (two) and node-b (one): the dsr
// side gets the external IP's table over both nodes (node-b tunnelled to
// at its InternalIP, about a third of the slots) and the dataplane the
// frontend's own virtual service over node-a's endpoints only. A bad
// annotation value falls back to the default (nat): the dsr side is
// emptied, the frontend balances over every endpoint again, and the
// Service gets a ForwardingModeInvalid Warning Event naming the value.
func TestIntegrationDSRWiring(t *testing.T) {
	srv := apitest.Start(t)
	ns := srv.Namespace(t)
	client := srv.Client
	createNode(t, client, "node-a", "192.168.0.10")
	createNode(t, client, "node-b", "192.168.0.11")
	v4 := discoveryv1.AddressTypeIPv4
	createAll(t, client, ns, []*corev1.Service{
		e2eService("dsr", func(s *corev1.ServiceSpec) { s.ExternalIPs = []string{"198.51.100.7"} }),
	}, []*discoveryv1.EndpointSlice{
		e2eSlice("dsr", "dsr-1", v4, nil, readyAt("10.1.0.1", "node-a"), readyAt("10.1.0.2", "node-a"), readyAt("10.2.0.1", "node-b")),
	})
	setMode := func(mode string) {
		t.Helper()
		svc, err := client.CoreV1().Services(ns).Get(t.Context(), "dsr", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if svc.Annotations == nil {
			svc.Annotations = map[string]string{}
		}
		svc.Annotations[k8s.AnnotationForwardingMode] = mode
		if _, err := client.CoreV1().Services(ns).Update(t.Context(), svc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setMode("dsr")
	d := startE2E(t, srv.Admin, "node-a", "")
	frontend := model.VirtualServiceKey{Addr: netip.MustParseAddr("198.51.100.7"), Port: 80, Protocol: model.TCP}

	harness.Poll(t, 2*time.Minute, func() error {
		p, ok := d.dsr.last()
		if !ok || len(p.Frontends) != 1 {
			return fmt.Errorf("dsr plan %+v: want one frontend", p)
		}
		if p.Frontends[0].VirtualServiceKey != frontend || p.Addr != netip.MustParseAddr("192.168.0.10") {
			return fmt.Errorf("dsr plan of %s for %v, want node-a's 192.168.0.10 for %v", p.Addr, p.Frontends[0].VirtualServiceKey, frontend)
		}
		if len(p.Peers) != 1 || p.Peers[0].Name != "node-b" || p.Peers[0].Addr != netip.MustParseAddr("192.168.0.11") {
			return fmt.Errorf("dsr peers %+v, want node-b at 192.168.0.11", p.Peers)
		}
		peer := 0
		for _, m := range p.Frontends[0].Slots {
			if m == p.Peers[0].Mark {
				peer++
			}
		}
		if n := len(p.Frontends[0].Slots); n != 16381 || peer < n/4 || peer > n*5/12 {
			return fmt.Errorf("node-b holds %d of %d slots, want about a third of the default 16381", peer, n)
		}
		return nil
	})
	harness.Poll(t, time.Minute, func() error {
		got, err := d.applied(ns)
		if err != nil {
			return err
		}
		for _, vs := range got["dsr"].VirtualServices {
			if vs.Address == netip.AddrPortFrom(frontend.Addr, 80) {
				if len(vs.Destinations) != 2 || !vs.Local {
					return fmt.Errorf("dsr frontend %+v: want Local over node-a's two endpoints", vs)
				}
				return nil
			}
		}
		return fmt.Errorf("no frontend %v applied: %+v", frontend, got["dsr"])
	})

	setMode("DSR") // not a mode: the default, nat
	harness.Poll(t, 2*time.Minute, func() error {
		if p, _ := d.dsr.last(); len(p.Frontends) != 0 {
			return fmt.Errorf("bad annotation: dsr plan still has %d frontends", len(p.Frontends))
		}
		got, err := d.applied(ns)
		if err != nil {
			return err
		}
		for _, vs := range got["dsr"].VirtualServices {
			if vs.Address == netip.AddrPortFrom(frontend.Addr, 80) && len(vs.Destinations) == 3 && !vs.Local {
				return nil
			}
		}
		return fmt.Errorf("the frontend does not balance over the 3 endpoints yet: %+v", got["dsr"])
	})
	sel := fields.Set{"involvedObject.name": "dsr", "reason": k8s.ReasonForwardingModeInvalid}.AsSelector().String()
	harness.Poll(t, time.Minute, func() error {
		l, err := client.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			return err
		}
		for _, e := range l.Items {
			if e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, `"DSR"`) && e.Source.Host == "node-a" {
				return nil
			}
		}
		return fmt.Errorf("no %s Warning Event naming \"DSR\" from node-a on the Service: %+v", k8s.ReasonForwardingModeInvalid, l.Items)
	})
}
