//go:build integration

package deploy

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/switchyard-lb/switchyard/core/ipam"
	"github.com/switchyard-lb/switchyard/core/lbipam"
	"github.com/switchyard-lb/switchyard/test/apitest"
	"github.com/switchyard-lb/switchyard/test/harness"
)

// TestIntegrationDaemonWithDeployRBAC runs the daemon and the address
// allocator with the token of the ServiceAccount deploy/ creates, bound by
// exactly deploy/'s RBAC: both must do their work without a single denial.
func TestIntegrationDaemonWithDeployRBAC(t *testing.T) {
	s := apitest.Start(t)
	mustKubectl(t, s, "apply", "-f", "namespace.yaml")
	mustKubectl(t, s, "apply", "-k", ".")
	ctx := t.Context()

	if _, err := s.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a"},
		Status:     corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.0.10"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	app := s.Namespace(t)
	svc, err := s.Client.CoreV1().Services(app).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeLoadBalancer,
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready, port, proto := true, int32(8080), corev1.ProtocolTCP
	if _, err := s.Client.DiscoveryV1().EndpointSlices(app).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.1.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		Ports:       []discoveryv1.EndpointPort{{Name: new("http"), Port: &port, Protocol: &proto}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	token := s.ServiceAccountConfig(t, namespace, "switchyard")

	t.Run("daemon", func(t *testing.T) {
		cfg := harness.WriteConfig(t, "")
		d := harness.Exec(t, "daemon", harness.BuildDaemon(t), nil, "--config", cfg.Path, "--kubeconfig", s.WriteKubeconfig(t, token),
			"--hostname-override", "node-a", "--log-format", "text", "--v=2")
		defer d.LogIfFailed(t)

		harness.Poll(t, 60*time.Second, func() error {
			code, body, err := harness.Get("http://" + cfg.Metrics + "/debug/state")
			if err != nil || code != http.StatusOK {
				return fmt.Errorf("/debug/state = %d %v", code, err)
			}
			if !strings.Contains(body, svc.Spec.ClusterIP) || !strings.Contains(body, "10.1.0.1") {
				return fmt.Errorf("/debug/state lacks %s -> 10.1.0.1:\n%s", svc.Spec.ClusterIP, body)
			}
			return nil
		})
		harness.WaitReady(t, cfg.Health, time.Minute)
		if l := strings.ToLower(d.Logs.String()); strings.Contains(l, "forbidden") {
			t.Errorf("the daemon was denied something:\n%s", d.Logs.String())
		}
	})

	t.Run("address allocator", func(t *testing.T) {
		var logs harness.Buffer
		c, err := lbipam.New(lbipam.Config{
			Client:   kubernetes.NewForConfigOrDie(token),
			Identity: "node-a",
			Pools:    []ipam.Pool{{Name: "public", Addresses: []string{"198.51.100.10-198.51.100.19"}, AutoAssign: true}},
			Log:      slog.New(slog.NewTextHandler(&logs, nil)),
		})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); c.Run(runCtx) }()
		defer func() {
			cancel()
			<-done
			if t.Failed() {
				t.Logf("allocator logs:\n%s", logs.String())
			}
		}()

		harness.Poll(t, 60*time.Second, func() error {
			got, err := s.Client.CoreV1().Services(app).Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if ing := got.Status.LoadBalancer.Ingress; len(ing) != 1 || !strings.HasPrefix(ing[0].IP, "198.51.100.") {
				return fmt.Errorf("status.loadBalancer.ingress = %+v, want one address from the pool", ing)
			}
			return nil
		})
		lease, err := s.Client.CoordinationV1().Leases(namespace).Get(ctx, lbipam.DefaultLeaseName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("allocator Lease: %v", err)
		}
		if h := lease.Spec.HolderIdentity; h == nil || *h != "node-a" {
			t.Errorf("Lease holder = %v, want node-a", h)
		}
		if l := strings.ToLower(logs.String()); strings.Contains(l, "forbidden") {
			t.Errorf("the allocator was denied something:\n%s", logs.String())
		}
	})
}
