//go:build integration

package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/switchyard-lb/switchyard/announcers/cloud/cloudtest"
	"github.com/switchyard-lb/switchyard/core/k8s/k8stest"
	"github.com/switchyard-lb/switchyard/core/lbipam"
	"github.com/switchyard-lb/switchyard/test/apitest"
	"github.com/switchyard-lb/switchyard/test/harness"
)

// The harness of the integration tests that run the daemon as main runs
// it (run, with flags and a config file) against the test API server.

// mainDaemon is one daemon run as main runs it.
type mainDaemon struct {
	*daemonProc
	node string
	tc   *testConfig
}

// startMain runs the daemon as node with the config tc against the API
// server of kubeconfig, with the text log format and the extra flags,
// its stdout and stderr both going to its logs. The caller stops it.
func startMain(t *testing.T, kubeconfig, node string, tc *testConfig, flags ...string) *mainDaemon {
	t.Helper()
	args := append([]string{"--config", tc.Path, "--kubeconfig", kubeconfig, "--hostname-override", node, "--log-format", "text"}, flags...)
	logs := &syncBuffer{}
	return &mainDaemon{
		daemonProc: goDaemon(t.Context(), node, logs, func(ctx context.Context) error { return run(ctx, args, logs, logs) }),
		node:       node,
		tc:         tc,
	}
}

// finish stops the daemon (failing the test unless run returns nil) and
// logs what it wrote if the test failed.
func (d *mainDaemon) finish(t *testing.T) {
	t.Helper()
	d.Stop(t)
	d.LogIfFailed(t)
}

// finishUnchecked is finish for the tests that do not check what run
// returns.
func (d *mainDaemon) finishUnchecked(t *testing.T) {
	t.Helper()
	d.Halt()
	d.LogIfFailed(t)
}

// waitServing waits until the daemon serves its metrics: using the
// client while run sets up klog races on klog's globals.
func (d *mainDaemon) waitServing(t *testing.T) {
	t.Helper()
	poll(t, 30*time.Second, func() error {
		if _, ok := d.metric("switchyard_membership_members "); !ok {
			return fmt.Errorf("daemon not serving metrics yet")
		}
		return nil
	})
}

// metric returns the value of the sample whose name and labels start
// with prefix, or false.
func (d *mainDaemon) metric(prefix string) (float64, bool) {
	return harness.Metric(d.tc.Metrics, prefix)
}

// setNodeReady creates or updates a Node with an InternalIP and the
// Ready condition: there is no kubelet to do it.
func setNodeReady(t *testing.T, client kubernetes.Interface, name, addr string, ready bool) {
	t.Helper()
	ctx := t.Context()
	n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		n, err = client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: addr}}
	n.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: status, Reason: "Test",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
	}}
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// freeGossipPort returns a TCP and UDP port free on 127.0.0.1 and
// 127.0.0.2, where the two daemons gossip.
func freeGossipPort(t *testing.T) int {
	t.Helper()
	for range 20 {
		port := harness.FreePort(t, netip.MustParseAddr("127.0.0.1"))
		free := true
		for _, host := range []string{"127.0.0.1", "127.0.0.2"} {
			addr := net.JoinHostPort(host, strconv.Itoa(port))
			tl, terr := net.Listen("tcp", addr)
			ul, uerr := net.ListenPacket("udp", addr)
			if terr == nil {
				tl.Close()
			}
			if uerr == nil {
				ul.Close()
			}
			free = free && terr == nil && uerr == nil
		}
		if free {
			return port
		}
	}
	t.Fatal("no free gossip port")
	return 0
}

// startCloudNode starts the API server of a one-node test with a cloud
// provider: a fresh namespace for the test's objects (returned), the
// allocator's Lease namespace, and node-a Ready at 127.0.0.1. Cleanup
// closes the provider (after the test's deferred calls stop its daemon).
func startCloudNode(t *testing.T) (*apitest.Server, string, *cloudtest.Server) {
	t.Helper()
	srv := apitest.Start(t)
	ns := srv.Namespace(t)
	ensureNamespace(t, srv.Client, lbipam.DefaultLeaseNamespace)
	provider := cloudtest.New("")
	t.Cleanup(provider.Close)
	setNodeReady(t, srv.Client, "node-a", "127.0.0.1", true)
	return srv, ns, provider
}

// startInPodNamespace starts the API server for a daemon that reads
// Secrets of its own namespace: switchyard-system, created and named by
// POD_NAMESPACE as the DaemonSet names it. It returns the namespace.
func startInPodNamespace(t *testing.T) (*apitest.Server, string) {
	t.Helper()
	srv := apitest.Start(t)
	const ns = "switchyard-system"
	ensureNamespace(t, srv.Client, ns)
	t.Setenv("POD_NAMESPACE", ns)
	return srv, ns
}

// ensureNamespace creates the namespace name unless it exists.
func ensureNamespace(t *testing.T, client kubernetes.Interface, name string) {
	t.Helper()
	if _, err := client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: name},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// lbService is testService as a LoadBalancer Service with the cluster IP
// and node port left to the API server.
func lbService(ns, name string) *corev1.Service {
	svc := k8stest.Service(ns, name, "")
	svc.Spec.Type = corev1.ServiceTypeLoadBalancer
	svc.Spec.ClusterIP, svc.Spec.ClusterIPs = "", nil
	svc.Spec.Ports[0].NodePort = 0
	return svc
}

// waitIngress waits until the Service ns/name has one ingress address in
// its status and returns it.
func waitIngress(t *testing.T, client kubernetes.Interface, ns, name string) string {
	t.Helper()
	var ip string
	poll(t, 60*time.Second, func() error {
		s, err := client.CoreV1().Services(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(s.Status.LoadBalancer.Ingress) != 1 {
			return fmt.Errorf("ingress = %+v, want one address", s.Status.LoadBalancer.Ingress)
		}
		ip = s.Status.LoadBalancer.Ingress[0].IP
		return nil
	})
	return ip
}

// waitReleased waits until the provider no longer serves ip.
func waitReleased(t *testing.T, provider *cloudtest.Server, ip string) {
	t.Helper()
	poll(t, 30*time.Second, func() error {
		if a, ok := provider.Addresses()[ip]; ok {
			return fmt.Errorf("provider still serves %+v", a)
		}
		return nil
	})
}
