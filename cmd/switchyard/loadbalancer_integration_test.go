//go:build integration

package main

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/switchyard-lb/switchyard/announcers/cloud/cloudtest"
	"github.com/switchyard-lb/switchyard/core/k8s/k8stest"
	"github.com/switchyard-lb/switchyard/core/lbipam"
	"github.com/switchyard-lb/switchyard/test/apitest"
)

// TestIntegrationLoadBalancer runs two daemons, node-a and node-b, with a
// pool and a cloud announcer pointed at a provider following
// announcers/cloud/CONTRACT.md: a LoadBalancer Service gets an address
// from the pool written to its status by the one allocator holding the
// Lease, exactly one node ensures it at the webhook, towards both nodes;
// a Service with externalTrafficPolicy Local goes only to the nodes with
// a ready endpoint, following them (localTrafficPolicy); the other node
// takes the first address over when the owner's daemon stops (it leaves
// gossip, which also drops it from the provider's backends), its Node
// turning NotReady keeps it out, and the address is released when the
// Service is deleted.
func TestIntegrationLoadBalancer(t *testing.T) {
	srv := apitest.Start(t)
	ns := srv.Namespace(t)
	ctx := t.Context()
	client := srv.Client
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: lbipam.DefaultLeaseNamespace},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	provider := cloudtest.New("secret-token")
	defer provider.Close()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("secret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	addrs := map[string]string{"node-a": "127.0.0.1", "node-b": "127.0.0.2"}
	for node, addr := range addrs {
		setNodeReady(t, client, node, addr, true)
	}
	port := freeGossipPort(t)
	daemons := map[string]*mainDaemon{}
	for _, node := range []string{"node-a", "node-b"} {
		tc := writeTestConfig(t, fmt.Sprintf(`pools:
  - name: public
    addresses: [192.0.2.0/28]
announcers:
  - name: provider
    type: cloud
    pools: [public]
    cloud:
      url: %q
      tokenFile: %q
membership:
  bindAddress: %s
  port: %d
  restartGrace: 0s # a stopped daemon's address moves at once (with a grace, one restarting keeps it)
`, provider.URL, tokenFile, addrs[node], port))
		daemons[node] = startMain(t, srv.Kubeconfig, node, tc, "--v=2")
	}
	defer func() {
		for _, d := range daemons {
			d.finish(t)
		}
	}()

	// Both daemons see each other through gossip.
	poll(t, 30*time.Second, func() error {
		for _, d := range daemons {
			if v, _ := d.metric("switchyard_membership_members "); v != 2 {
				return fmt.Errorf("%s: switchyard_membership_members = %v, want 2", d.node, v)
			}
		}
		return nil
	})

	if _, err := client.CoreV1().Services(ns).Create(ctx, lbService(ns, "web"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.DiscoveryV1().EndpointSlices(ns).Create(ctx, k8stest.Slice(ns, "web-abc", "web", true, "10.1.0.1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The allocator writes one address of the pool.
	began := time.Now()
	ip := waitIngress(t, client, ns, "web")
	if a, err := netip.ParseAddr(ip); err != nil || !netip.MustParsePrefix("192.0.2.0/28").Contains(a) {
		t.Fatalf("allocated %q, want an address of 192.0.2.0/28", ip)
	}
	t.Logf("address %s allocated %s after creation", ip, time.Since(began).Round(time.Millisecond))
	lease, err := client.CoordinationV1().Leases(lbipam.DefaultLeaseNamespace).Get(ctx, lbipam.DefaultLeaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	leader := holder(lease)
	if daemons[leader] == nil {
		t.Fatalf("Lease holder = %q, want node-a or node-b", leader)
	}
	// Only the allocator reports the pool's usage.
	poll(t, 30*time.Second, func() error {
		for _, d := range daemons {
			v, ok := d.metric(`switchyard_pool_addresses_used{pool="public"} `)
			if want := d.node == leader; ok != want || (ok && v != 1) {
				return fmt.Errorf("%s: switchyard_pool_addresses_used = %v (reported %v), want reported only by the leader %s, 1", d.node, v, ok, leader)
			}
		}
		return nil
	})

	// Exactly one node ensures the address at the provider.
	var owner string
	poll(t, 30*time.Second, func() error {
		a, ok := provider.Addresses()[ip]
		if !ok {
			return fmt.Errorf("provider has no %s; it has %v", ip, provider.Addresses())
		}
		owner = a.Owner
		return nil
	})
	t.Logf("address %s ensured by %s %s after creation", ip, owner, time.Since(began).Round(time.Millisecond))
	other := "node-a"
	if owner == "node-a" {
		other = "node-b"
	}
	// Each daemon's loop says what it announces through the cloud
	// announcer: the owner the address, the other nothing.
	poll(t, 30*time.Second, func() error {
		for _, d := range daemons {
			got, err := announcedBy(d.tc.Metrics, "provider")
			if err != nil {
				return err
			}
			want := []string{}
			if d.node == owner {
				want = []string{ip}
			}
			if strings.Join(got, ",") != strings.Join(want, ",") {
				return fmt.Errorf("%s announces %v, want %v", d.node, got, want)
			}
		}
		return nil
	})
	if owners := putOwners(t, provider, ip); len(owners) != 1 || !owners[owner] {
		t.Fatalf("ensures of %s came from %v, want only %s", ip, owners, owner)
	}
	if a := provider.Addresses()[ip]; a.Services[0] != ns+"/web" || nodeNames(a) != "node-a,node-b" {
		t.Errorf("provider's state = %+v, want Service %s/web (externalTrafficPolicy Cluster) fronting both nodes", a, ns)
	}

	localTrafficPolicy(t, client, ns, provider)

	// The owner's daemon stops: it leaves gossip on the way out, so the
	// other node takes the address over before Kubernetes notices, and
	// fronts only itself (gossip says the owner is dead).
	daemons[owner].Stop(t)
	stopped := time.Now()
	poll(t, 30*time.Second, func() error {
		if a := provider.Addresses()[ip]; a.Owner != other || nodeNames(a) != other {
			return fmt.Errorf("provider's %s = %+v, want owner %s fronting only itself", ip, a, other)
		}
		return nil
	})
	t.Logf("takeover of %s by %s through gossip: %s after the owner's daemon stopped",
		ip, other, time.Since(stopped).Round(time.Millisecond))

	// Without a kubelet, the test marks the stopped node NotReady: the
	// provider then fronts only the other node.
	setNodeReady(t, client, owner, addrs[owner], false)
	marked := time.Now()
	poll(t, 30*time.Second, func() error {
		if a := provider.Addresses()[ip]; a.Owner != other || nodeNames(a) != other {
			return fmt.Errorf("provider's %s = %+v, want owner %s fronting only itself", ip, a, other)
		}
		return nil
	})
	t.Logf("NotReady node dropped from the provider's backends %s after the update", time.Since(marked).Round(time.Millisecond))
	// The allocator, wherever it runs now, does not renumber.
	poll(t, 30*time.Second, func() error {
		if v, ok := daemons[other].metric(`switchyard_pool_addresses_used{pool="public"} `); !ok || v != 1 {
			return fmt.Errorf("%s: switchyard_pool_addresses_used = %v (reported %v), want 1", other, v, ok)
		}
		return nil
	})
	if s, err := client.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{}); err != nil ||
		len(s.Status.LoadBalancer.Ingress) != 1 || s.Status.LoadBalancer.Ingress[0].IP != ip {
		t.Errorf("after the failover the ingress is %+v (%v), want %s", s.Status.LoadBalancer.Ingress, err, ip)
	}

	// Deleting the Service releases the address at the provider.
	if err := client.CoreV1().Services(ns).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReleased(t, provider, ip)
	poll(t, 30*time.Second, func() error {
		if v, ok := daemons[other].metric(`switchyard_pool_addresses_used{pool="public"} `); !ok || v != 0 {
			return fmt.Errorf("%s: switchyard_pool_addresses_used = %v (reported %v), want 0", other, v, ok)
		}
		return nil
	})
}

// localTrafficPolicy checks, with both daemons running, that a
// LoadBalancer Service with externalTrafficPolicy Local is ensured
// towards the nodes running a ready endpoint only, each weighed by its
// ready endpoints, following its endpoints, then deletes it.
func localTrafficPolicy(t *testing.T, client kubernetes.Interface, ns string, provider *cloudtest.Server) {
	t.Helper()
	ctx := t.Context()
	svc := k8stest.Service(ns, "local", "")
	svc.Spec.Type = corev1.ServiceTypeLoadBalancer
	svc.Spec.ClusterIP, svc.Spec.ClusterIPs = "", nil
	svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	if _, err := client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	slice := k8stest.Slice(ns, "local-abc", "local", true, "10.1.1.2")
	slice.Endpoints[0].NodeName = k8stest.Ptr("node-b")
	if _, err := client.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ip := waitIngress(t, client, ns, "local")
	// Only node-b is eligible: it owns the address and is its only backend.
	poll(t, 30*time.Second, func() error {
		if a := provider.Addresses()[ip]; a.Owner != "node-b" || nodeWeights(a) != "node-b=1" {
			return fmt.Errorf("provider's %s = %+v, want owner node-b fronting node-b only, weight 1", ip, a)
		}
		return nil
	})
	if owners := putOwners(t, provider, ip); len(owners) != 1 || !owners["node-b"] {
		t.Errorf("ensures of %s came from %v, want only node-b", ip, owners)
	}

	// An endpoint appears on node-a: both nodes serve the address now
	// (whichever owns it).
	slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
		Addresses: []string{"10.1.1.1"}, NodeName: k8stest.Ptr("node-a"),
		Conditions: discoveryv1.EndpointConditions{Ready: k8stest.Ptr(true)},
	})
	if _, err := client.DiscoveryV1().EndpointSlices(ns).Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	moved := time.Now()
	poll(t, 30*time.Second, func() error {
		if a, ok := provider.Addresses()[ip]; !ok || nodeWeights(a) != "node-a=1,node-b=1" {
			return fmt.Errorf("provider's %s = %+v (present %v), want node-a and node-b, weight 1 each", ip, a, ok)
		}
		return nil
	})
	t.Logf("endpoint on node-a reached the provider's backends of %s after %s", ip, time.Since(moved).Round(time.Millisecond))

	// Two more ready endpoints on node-b, and an unready one: node-b's
	// weight alone changes, in one more ensure.
	before := countPuts(provider, ip)
	slice.Endpoints = append(slice.Endpoints,
		discoveryv1.Endpoint{Addresses: []string{"10.1.1.3"}, NodeName: k8stest.Ptr("node-b"), Conditions: discoveryv1.EndpointConditions{Ready: k8stest.Ptr(true)}},
		discoveryv1.Endpoint{Addresses: []string{"10.1.1.4"}, NodeName: k8stest.Ptr("node-b"), Conditions: discoveryv1.EndpointConditions{Ready: k8stest.Ptr(true)}},
		discoveryv1.Endpoint{Addresses: []string{"10.1.1.5"}, NodeName: k8stest.Ptr("node-b"), Conditions: discoveryv1.EndpointConditions{Ready: k8stest.Ptr(false)}},
	)
	if _, err := client.DiscoveryV1().EndpointSlices(ns).Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	grown := time.Now()
	poll(t, 30*time.Second, func() error {
		if a := provider.Addresses()[ip]; nodeWeights(a) != "node-a=1,node-b=3" {
			return fmt.Errorf("provider's %s = %+v, want node-a weight 1, node-b weight 3", ip, a)
		}
		return nil
	})
	t.Logf("node-b's new endpoints reached the provider's weights of %s after %s", ip, time.Since(grown).Round(time.Millisecond))
	// Nothing else changes: no more ensures than the one, even across the
	// daemons' syncs that follow.
	time.Sleep(2 * time.Second)
	if n := countPuts(provider, ip) - before; n != 1 {
		t.Errorf("%d ensures of %s for one change of weights, want 1", n, ip)
	}

	if err := client.CoreV1().Services(ns).Delete(ctx, "local", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReleased(t, provider, ip)
}

// nodeWeights returns an address's backends as name=weight, joined by
// commas.
func nodeWeights(a cloudtest.Address) string {
	var out []string
	for _, n := range a.Nodes {
		out = append(out, fmt.Sprintf("%s=%d", n.Name, n.Weight))
	}
	return strings.Join(out, ",")
}

// countPuts returns how many ensures of ip the provider received.
func countPuts(p *cloudtest.Server, ip string) int {
	n := 0
	for _, r := range p.Requests() {
		if r.Method == "PUT" && strings.HasSuffix(r.Path, "/"+ip) {
			n++
		}
	}
	return n
}

// nodeNames returns the names of an address's backends, joined by commas.
func nodeNames(a cloudtest.Address) string {
	var names []string
	for _, n := range a.Nodes {
		names = append(names, n.Name)
	}
	return strings.Join(names, ",")
}

// announcedBy returns the addresses a daemon's /debug/state says the
// announcer last accepted.
func announcedBy(metricsAddr, announcer string) ([]string, error) {
	code, body, err := httpGet("http://" + metricsAddr + "/debug/state")
	if err != nil || code != 200 {
		return nil, fmt.Errorf("/debug/state: %d %v", code, err)
	}
	var st struct {
		Announced map[string][]struct {
			Address string `json:"address"`
		} `json:"announced"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		return nil, err
	}
	set, ok := st.Announced[announcer]
	if !ok {
		return nil, fmt.Errorf("announcer %s has not announced yet", announcer)
	}
	out := []string{}
	for _, a := range set {
		out = append(out, a.Address)
	}
	return out, nil
}

func holder(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// putOwners returns the owners named by the provider's ensure requests
// for ip.
func putOwners(t *testing.T, p *cloudtest.Server, ip string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, r := range p.Requests() {
		if r.Method != "PUT" || !strings.HasSuffix(r.Path, "/"+ip) {
			continue
		}
		var body struct {
			Owner string `json:"owner"`
		}
		if err := json.Unmarshal([]byte(r.Body), &body); err != nil {
			t.Fatalf("ensure body %q: %v", r.Body, err)
		}
		out[body.Owner] = true
	}
	return out
}
