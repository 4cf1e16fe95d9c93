package lbipam_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/switchyard-lb/switchyard/core/ipam"
	"github.com/switchyard-lb/switchyard/core/lbipam"
	"github.com/switchyard-lb/switchyard/test/harness"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestNewRejects(t *testing.T) {
	good := func() lbipam.Config {
		return lbipam.Config{
			Client: fake.NewClientset(), Identity: "node-a", Log: quiet,
			Pools: []ipam.Pool{{Name: "p", Addresses: []string{"192.0.2.0/24"}, AutoAssign: true}},
		}
	}
	tests := []struct {
		name string
		mod  func(*lbipam.Config)
	}{
		{"no client", func(c *lbipam.Config) { c.Client = nil }},
		{"no identity", func(c *lbipam.Config) { c.Identity = "" }},
		{"bad pool", func(c *lbipam.Config) { c.Pools[0].Addresses = []string{"192.0.2.0/33"} }},
		{"renew deadline not below lease duration", func(c *lbipam.Config) {
			c.LeaseDuration, c.RenewDeadline = 2*time.Second, 2*time.Second
		}},
		{"retry period too long", func(c *lbipam.Config) {
			c.LeaseDuration, c.RenewDeadline, c.RetryPeriod = 5*time.Second, 2*time.Second, 2*time.Second
		}},
	}
	if _, err := lbipam.New(good()); err != nil {
		t.Fatalf("New(good config) = %v", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good()
			tt.mod(&cfg)
			if _, err := lbipam.New(cfg); err == nil {
				t.Error("New accepted the config")
			}
		})
	}
}

func addrsOf(t *testing.T, c kubernetes.Interface, name string) []string {
	t.Helper()
	svc, err := c.CoreV1().Services("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, i := range svc.Status.LoadBalancer.Ingress {
		out = append(out, i.IP)
	}
	return out
}

func waitAddrs(t *testing.T, c kubernetes.Interface, name string, want []string) {
	t.Helper()
	harness.Poll(t, time.Minute, func() error {
		if diff := cmp.Diff(want, addrsOf(t, c, name)); diff != "" {
			return fmt.Errorf("%s ingress (-want +got):\n%s", name, diff)
		}
		return nil
	})
}

// TestControllerFake runs two controllers against a fake clientset: one
// leads and allocates, the pools can shrink under it, and when it stops
// the other takes over.
func TestControllerFake(t *testing.T) {
	client := fake.NewClientset()
	pools := []ipam.Pool{{Name: "p", Addresses: []string{"192.0.2.10-192.0.2.11"}, AutoAssign: true}}
	var stops []func()
	ctls := map[string]*lbipam.Controller{}
	for _, id := range []string{"node-a", "node-b"} {
		c, err := lbipam.New(lbipam.Config{
			Client: client, Identity: id, Pools: pools, Log: quiet,
			LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 100 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); c.Run(ctx) }()
		stops = append(stops, func() { cancel(); <-done })
		ctls[id] = c
		if id == "node-a" {
			harness.Poll(t, time.Minute, func() error {
				if !c.IsLeader() {
					return errors.New("node-a does not lead")
				}
				return nil
			})
		}
	}
	defer func() {
		for _, s := range stops {
			s()
		}
	}()
	a, b := ctls["node-a"], ctls["node-b"]
	if b.IsLeader() || b.Stats() != nil {
		t.Fatalf("node-b leads too: %v %v", b.IsLeader(), b.Stats())
	}

	for _, name := range []string{"one", "two", "three"} {
		_, err := client.CoreV1().Services("default").Create(context.Background(), &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
				Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if name != "three" {
			waitAddrs(t, client, name, []string{fmt.Sprintf("192.0.2.1%d", map[string]int{"one": 0, "two": 1}[name])})
		}
	}
	harness.Poll(t, time.Minute, func() error {
		evs, err := client.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == "three" && e.Reason == lbipam.ReasonAllocationFailed {
				return nil
			}
		}
		return errors.New("no AllocationFailed Event for three")
	})
	if diff := cmp.Diff([]ipam.PoolStats{{Pool: "p", Total: 2, Used: 2}}, a.Stats()); diff != "" {
		t.Errorf("Stats (-want +got):\n%s", diff)
	}

	// Shrinking the pool takes 192.0.2.11 from two.
	if err := a.SetPools([]ipam.Pool{{Name: "p", Addresses: []string{"192.0.2.10/32"}, AutoAssign: true}}); err != nil {
		t.Fatal(err)
	}
	waitAddrs(t, client, "two", nil)
	if err := a.SetPools([]ipam.Pool{{Name: "p", Addresses: []string{"bogus"}}}); err == nil {
		t.Error("SetPools accepted an invalid pool")
	}

	// Deleting one lets a waiting Service have its address.
	if err := client.CoreV1().Services("default").Delete(context.Background(), "one", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	harness.Poll(t, time.Minute, func() error {
		two, three := addrsOf(t, client, "two"), addrsOf(t, client, "three")
		if len(two)+len(three) != 1 {
			return fmt.Errorf("two %v, three %v: want one of them on 192.0.2.10", two, three)
		}
		return nil
	})

	// node-a stops; node-b takes over with the pools it was given.
	stops[0]()
	harness.Poll(t, time.Minute, func() error {
		if !b.IsLeader() {
			return errors.New("node-b does not lead")
		}
		return nil
	})
	if a.IsLeader() || a.Stats() != nil {
		t.Errorf("stopped node-a still leads: %v %v", a.IsLeader(), a.Stats())
	}
}
