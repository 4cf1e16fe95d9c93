package cluster_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchyard-lb/switchyard/core/k8s"
	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/test/cluster"
)

// TestDSRRestartKeepsPeerMarks: the router sends a dsr Service's ingress
// IP through node3 only, which holds no endpoint and tunnels every flow
// to node1 or node2. A Node object node0 (never ready, no daemon) is
// created after the daemons started, so node3's daemon gives it the next
// free peer mark, after node1's and node2's; a daemon started afresh
// would number the four nodes in name order and give node1 and node2
// other marks. node3's daemon is restarted under long-lived TCP flows:
// its kernel's dsr services (mark -> tunnel destination) must be the same
// after the restart as before (the restarted daemon reads the marks back,
// ipvs.DSR.PeerMarks), every flow must survive with its pod, and every
// pod must have seen the client's own address.
func TestDSRRestartKeepsPeerMarks(t *testing.T) {
	c := requireGuest(t)
	if len(c.Nodes) < 3 {
		t.Fatalf("%d nodes: want 3 (two backend nodes, one ingress only)", len(c.Nodes))
	}
	ingressOnly := c.Nodes[2]
	ip := netip.MustParseAddr("198.51.100.30")
	svc, err := c.CreateService(t.Context(), namespace(t, c), cluster.ServiceSpec{
		Name: "lb-restart", Type: corev1.ServiceTypeLoadBalancer, IngressIP: ip,
		Annotations: map[string]string{k8s.AnnotationForwardingMode: "dsr"},
		Endpoints:   []cluster.Endpoint{{Pod: c.Nodes[0].Pods[0]}, {Pod: c.Nodes[1].Pods[0]}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.DeleteService(context.Background(), svc); err != nil {
			t.Error(err)
		}
	})
	if err := c.RouteThrough(ip, ingressOnly); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.RouteThrough(ip, nil); err != nil {
			t.Error(err)
		}
	})
	if _, err := waitAnswer(t.Context(), c.Client, svc.AddrOn(ip, cluster.PortHTTP), programmed, sawClient(cluster.ClientAddr)); err != nil {
		t.Fatalf("dsr through %s: %v", ingressOnly.Name, err)
	}

	// node0 joins: a Node of its own, never ready (no election picks
	// it), at an address no host answers.
	node0 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node0", Labels: map[string]string{"switchyard.dev/cluster-lab": "true"}}}
	created, err := c.Kube.CoreV1().Nodes().Create(t.Context(), node0, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Kube.CoreV1().Nodes().Delete(context.Background(), "node0", metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete Node node0: %v", err)
		}
	})
	created.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.99"}}
	created.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "ClusterLab",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if _, err := c.Kube.CoreV1().Nodes().UpdateStatus(t.Context(), created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitDSRMarks(t, ingressOnly, "node0")
	before := dsrPeerServices(t, ingressOnly)
	if len(before) != 2 {
		t.Fatalf("%s's dsr peer services %v: want node1's and node2's", ingressOnly.Name, before)
	}

	const flows = 40
	tr, err := cluster.StartTraffic(t.Context(), c.Client, cluster.TrafficSpec{
		Network: "tcp", Target: svc.AddrOn(ip, cluster.PortTCP), Flows: flows, Interval: time.Second, Timeout: stallTimeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := ingressOnly.StopDaemon(); err != nil {
		t.Fatal(err)
	}
	if err := ingressOnly.StartDaemon(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The restarted daemon applied its dsr side once it shows it.
	waitDSRMarks(t, ingressOnly, "node0")
	time.Sleep(3 * time.Second)
	after := dsrPeerServices(t, ingressOnly)
	report := tr.Stop()
	t.Logf("%s restarted: dsr peer services %v before, %v after; flows %s", ingressOnly.Name, before, after, report)
	if d := cmp.Diff(before, after, cmpopts.EquateComparable(netip.Addr{})); d != "" {
		t.Errorf("%s's dsr peer services changed across its daemon's restart (-before +after):\n%s", ingressOnly.Name, d)
	}
	if report.Established() != flows || report.Survived() != flows {
		t.Errorf("flows through %s: %s; want all %d established and unbroken across the restart", ingressOnly.Name, report, flows)
	}
	for _, f := range report.Flows {
		if !f.Established.IsZero() && f.Client != f.Local {
			t.Errorf("the pod %s saw %s as %s, want the client's own address and port", f.Backend, f.Local, f.Client)
		}
	}
}

// waitDSRMarks waits (bounded by programmed) until n's daemon shows an
// applied dsr side in /debug/state whose marks name node.
func waitDSRMarks(t *testing.T, n *cluster.Node, node string) {
	t.Helper()
	deadline := time.Now().Add(programmed)
	for {
		st, err := n.Plan(t.Context())
		if err == nil && st.DSR != nil {
			if _, ok := st.DSR.Marks[node]; ok {
				return
			}
			err = fmt.Errorf("marks %v", st.DSR.Marks)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's /debug/state shows no dsr side with a mark for %s after %s: %v", n.Name, node, programmed, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// dsrPeerServices reads n's kernel's dsr peer services: each dsr mark's
// IPVS firewall-mark service (IPv4) with its tunnel destinations.
func dsrPeerServices(t *testing.T, n *cluster.Node) map[uint32][]netip.Addr {
	t.Helper()
	var k *ipvs.Netlink
	if err := n.NS.Do(func() (err error) { k, err = ipvs.NewNetlink(); return err }); err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	svcs, err := k.Services()
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint32][]netip.Addr{}
	for _, s := range svcs {
		m, ok := ipvs.MarkOf(s.VirtualServiceKey)
		if !ok || !ipvs.IsDSRMark(m) || s.Addr.Is6() {
			continue
		}
		ds, err := k.Destinations(s.VirtualServiceKey)
		if err != nil {
			t.Fatal(err)
		}
		out[m] = []netip.Addr{}
		for _, d := range ds {
			out[m] = append(out[m], d.Addr)
		}
	}
	return out
}
