//go:build integration

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchyard-lb/switchyard/test/apitest"
)

// TestIntegrationHealthCheckWeight runs the daemon of node-a against the
// real API server with a LoadBalancer Service with externalTrafficPolicy
// Local, and asks its healthCheckNodePort with a plain HTTP client as
// the Service's EndpointSlice changes: the X-Load-Balancing-Endpoint-
// Weight header and kube-proxy's JSON body follow node-a's ready
// endpoints (not node-b's, not the unready ones), 503 with weight 0 when
// none is left.
func TestIntegrationHealthCheckWeight(t *testing.T) {
	srv := apitest.Start(t)
	ns := srv.Namespace(t)
	client := srv.Client
	ctx := t.Context()
	createNode(t, client, "node-a", "192.168.0.10")
	createNode(t, client, "node-b", "192.168.0.11")
	v4 := discoveryv1.AddressTypeIPv4
	unready := func(addr, node string) e2eEndpoint { return e2eEndpoint{addr: addr, node: node} }
	svcs := createAll(t, client, ns, []*corev1.Service{
		e2eService("weighed", func(s *corev1.ServiceSpec) {
			s.Type = corev1.ServiceTypeLoadBalancer
			s.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}),
	}, []*discoveryv1.EndpointSlice{
		e2eSlice("weighed", "weighed-1", v4, nil, readyAt("10.1.0.1", "node-a"), readyAt("10.1.0.2", "node-b")),
	})
	port := svcs["weighed"].Spec.HealthCheckNodePort
	if port == 0 {
		t.Fatal("the API server allocated no healthCheckNodePort")
	}
	startE2E(t, srv.Admin, "node-a", "")

	steps := []struct {
		name       string
		eps        []e2eEndpoint // the slice's endpoints; nil keeps the created ones
		wantStatus int
		wantWeight string
		wantCount  int
	}{
		{"one ready endpoint on node-a, one on node-b", nil, 200, "1", 1},
		{"node-a gains two ready endpoints and an unready one", []e2eEndpoint{
			readyAt("10.1.0.1", "node-a"), readyAt("10.1.0.3", "node-a"), readyAt("10.1.0.4", "node-a"),
			unready("10.1.0.5", "node-a"), readyAt("10.1.0.2", "node-b"),
		}, 200, "3", 3},
		{"one of them turns unready", []e2eEndpoint{
			readyAt("10.1.0.1", "node-a"), unready("10.1.0.3", "node-a"), readyAt("10.1.0.4", "node-a"),
			unready("10.1.0.5", "node-a"), readyAt("10.1.0.2", "node-b"),
		}, 200, "2", 2},
		{"none left on node-a", []e2eEndpoint{readyAt("10.1.0.2", "node-b"), readyAt("10.1.0.6", "node-b")}, 503, "0", 0},
	}
	for _, s := range steps {
		if s.eps != nil {
			slice := e2eSlice("weighed", "weighed-1", v4, nil, s.eps...)
			slice.Namespace = ns
			if _, err := client.DiscoveryV1().EndpointSlices(ns).Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		changed := time.Now()
		poll(t, 60*time.Second, func() error {
			status, weight, body, err := healthCheck(port)
			if err != nil {
				return err
			}
			if status != s.wantStatus || weight != s.wantWeight || body.LocalEndpoints != s.wantCount ||
				body.Service.Namespace != ns || body.Service.Name != "weighed" || !body.ServiceProxyHealthy {
				return fmt.Errorf("%s: answer %d, weight %q, body %+v; want %d, weight %q, %d local endpoints of %s/weighed, proxy healthy",
					s.name, status, weight, body, s.wantStatus, s.wantWeight, s.wantCount, ns)
			}
			return nil
		})
		t.Logf("%s: weight %s answered %s after the change", s.name, s.wantWeight, time.Since(changed).Round(time.Millisecond))
	}
}

// healthBody is kube-proxy's health check body.
type healthBody struct {
	Service struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"service"`
	LocalEndpoints      int  `json:"localEndpoints"`
	ServiceProxyHealthy bool `json:"serviceProxyHealthy"`
}

// healthCheck asks the health check on port as a load balancer would.
func healthCheck(port int32) (status int, weight string, body healthBody, err error) {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/", port))
	if err != nil {
		return 0, "", body, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", body, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		return 0, "", body, fmt.Errorf("body %q: %w", raw, err)
	}
	return resp.StatusCode, resp.Header.Get("X-Load-Balancing-Endpoint-Weight"), body, nil
}
