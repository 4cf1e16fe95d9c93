//go:build node

package node_test

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestTwoNodes brings up two guests on one L2 and checks what upstream's
// multi-node Services specs rest on: both Nodes Ready, a pod on each in
// its own guest's pod CIDR, pods reachable across the nodes (from the
// other guest, from the other pod, through the other guest's hostPort,
// from the host namespace), Switchyard's
// DaemonSet on both, and a guest's own proxy sending traffic to a backend
// on the other: a ClusterIP from each guest without a local endpoint, and
// node1's NodePort from the host namespace to a backend on node2 (which
// answers through node1 only if the proxy masquerades it).
func TestTwoNodes(t *testing.T) {
	const hostPort = 18080
	ctx := t.Context()
	n := up(t, 2)
	if len(n.Guests) != 2 {
		t.Fatalf("%d guests, want 2", len(n.Guests))
	}
	pods := make([]*corev1.Pod, len(n.Guests))
	ips := make([]string, len(n.Guests))
	for i, g := range n.Guests {
		pods[i] = netexecPod("web-" + g.Name)
		pods[i].Spec.NodeName = g.Name
		pods[i].Spec.Containers[0].Ports[0].HostPort = hostPort
		if _, err := n.Client.CoreV1().Pods("default").Create(ctx, pods[i], metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod on %s: %v", g.Name, err)
		}
	}
	for i, g := range n.Guests {
		ips[i] = waitPodReady(t, n, "default", pods[i].Name)
		ip, err := netip.ParseAddr(ips[i])
		if err != nil || !netip.MustParsePrefix(g.PodCIDR).Contains(ip) {
			t.Errorf("pod on %s has IP %s, want one in %s", g.Name, ips[i], g.PodCIDR)
		}
	}

	t.Run("PodToPodAcrossNodes", func(t *testing.T) {
		for i, g := range n.Guests {
			other := 1 - i
			url := "http://" + net.JoinHostPort(ips[other], "8080") + "/hostname"
			if out, err := guestTry(t, g, "busybox wget -qO- "+url); err != nil || out != pods[other].Name {
				t.Errorf("GET %s from %s = %q, %v; want %q", url, g.Name, out, err, pods[other].Name)
			}
			if out, err := kubectl(t, n, "exec", "-n", "default", pods[i].Name, "--", "wget", "-qO-", url); err != nil || out != pods[other].Name {
				t.Errorf("GET %s from the pod on %s = %q, %v; want %q", url, g.Name, out, err, pods[other].Name)
			}
			// The other guest's hostPort (the CNI's portmap), as KubeProxy's
			// CLOSE_WAIT spec reaches its server.
			hp := "http://" + net.JoinHostPort(n.Guests[other].IP, strconv.Itoa(hostPort)) + "/hostname"
			if out, err := kubectl(t, n, "exec", "-n", "default", pods[i].Name, "--", "wget", "-qO-", hp); err != nil || out != pods[other].Name {
				t.Errorf("GET %s from the pod on %s = %q, %v; want %q", hp, g.Name, out, err, pods[other].Name)
			}
			hctx, cancel := context.WithTimeout(ctx, callTimeout)
			body, err := n.PodHTTP(hctx, net.JoinHostPort(ips[i], "8080"), "/hostname")
			cancel()
			if err != nil || body != pods[i].Name {
				t.Errorf("GET the pod on %s from the host namespace = %q, %v; want %q", g.Name, body, err, pods[i].Name)
			}
		}
	})

	t.Run("SwitchyardAcrossNodes", func(t *testing.T) {
		if out, err := kubectl(t, n, "apply", "-k", "../tools/image/deploy"); err != nil {
			t.Fatalf("kubectl apply -k test/tools/image/deploy: %v\n%s", err, out)
		}
		if got := waitDaemonSetReady(t, n, "switchyard-system", "switchyard"); got != 2 {
			t.Fatalf("Switchyard ready on %d nodes, want 2", got)
		}
		// One Service per backend, each backend on one node only.
		svcs := make([]*corev1.Service, len(n.Guests))
		for i := range n.Guests {
			var err error
			svcs[i], err = n.Client.CoreV1().Services("default").Create(ctx, &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: pods[i].Name},
				Spec: corev1.ServiceSpec{
					Type:     corev1.ServiceTypeNodePort,
					Selector: pods[i].Labels,
					Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
				},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("create service: %v", err)
			}
		}
		// A ClusterIP from the guest without the endpoint: its own IPVS
		// table sends the connection over the L2 to the other guest's pod.
		for i, g := range n.Guests {
			other := 1 - i
			waitGuestGet(t, g, "http://"+svcs[other].Spec.ClusterIP+"/hostname", pods[other].Name)
		}
		// node1's NodePort from the host namespace, the backend on node2.
		node1, backend := n.Guests[0], pods[1]
		addr := net.JoinHostPort(node1.IP, strconv.Itoa(int(svcs[1].Spec.Ports[0].NodePort)))
		deadline := time.Now().Add(podTimeout)
		for {
			hctx, cancel := context.WithTimeout(ctx, callTimeout)
			body, err := n.PodHTTP(hctx, addr, "/hostname")
			cancel()
			if err == nil && body == backend.Name {
				break
			}
			if time.Now().After(deadline) {
				table, _ := guestTry(t, node1, "ipvsadm -Ln; nft list table inet switchyard")
				t.Fatalf("GET http://%s/hostname from the host namespace = %q, %v; want %q\n%s:\n%s", addr, body, err, backend.Name, node1.Name, table)
			}
			time.Sleep(2 * time.Second)
		}
	})
}
