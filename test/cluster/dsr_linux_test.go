package cluster_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/switchyard-lb/switchyard/core/k8s"
	"github.com/switchyard-lb/switchyard/test/cluster"
)

// envDSRFlows is how many long-lived flows TestDSRFlowsSurviveECMPChanges
// keeps open through each of its two Services (default 100; make
// bench-cluster runs 1,000, issue 12's done-when).
const (
	envDSRFlows     = "CLUSTER_DSR_FLOWS"
	defaultDSRFlows = 100
)

// TestDSRFlowsSurviveECMPChanges: two LoadBalancer Services in the BGP
// pool over the same pods on node1 and node2, one in dsr mode
// (switchyard.dev/forwarding-mode: dsr), one in nat mode, every node
// announcing both (FRR's ECMP route over the three nodes, hashing ports).
// Under CLUSTER_DSR_FLOWS long-lived TCP flows to each, node3, which
// holds no endpoint, leaves the ECMP set (its daemon stops: BGP
// withdraws, its kernel state stays) and joins it again (the daemon
// starts). It reports the flows kept in each mode:
//
//	cluster-metric dsr-ecmp-flows-kept-dsr-permille=N
//	cluster-metric dsr-ecmp-flows-kept-nat-permille=N
//	cluster-metric dsr-ecmp-replies-through-ingress-only=N
//
// and requires, in dsr mode, at least 99.5% of the flows healthy before
// the changes to survive both, every dsr flow's pod to have seen the
// client's own address, and no reply from the dsr address to leave
// through node3 (its uplink's counters). nat mode's loss is reported,
// not asserted.
func TestDSRFlowsSurviveECMPChanges(t *testing.T) {
	c := requireGuest(t)
	if len(c.Nodes) < 3 {
		t.Fatalf("%d nodes: want 3 (two backend nodes, one ingress only)", len(c.Nodes))
	}
	flows := envCount(t, envDSRFlows, defaultDSRFlows)
	guestCapacity(t, 2*flows)
	backends, ingressOnly := c.Nodes[:2], c.Nodes[2]
	create := func(name, mode string) *cluster.Service {
		var eps []cluster.Endpoint
		for _, n := range backends {
			eps = append(eps, cluster.Endpoint{Pod: n.Pods[0]})
		}
		svc, err := c.CreateService(t.Context(), namespace(t, c), cluster.ServiceSpec{
			Name: name, Type: corev1.ServiceTypeLoadBalancer, Pool: cluster.PoolBGP, Endpoints: eps,
			Annotations: map[string]string{k8s.AnnotationForwardingMode: mode},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			// Not t.Context(): it is canceled before cleanups run.
			if err := c.DeleteService(context.Background(), svc); err != nil {
				t.Error(err)
			}
		})
		if _, err := c.WaitLoadBalancerIP(t.Context(), svc, programmed); err != nil {
			t.Fatal(err)
		}
		// Every node announces either: dsr's ECMP over all nodes, and
		// externalTrafficPolicy Cluster for nat.
		waitNextHops(t, c, svc.LoadBalancerIP, c.Nodes, 3*time.Second)
		return svc
	}
	dsr, nat := create("lb-dsr", "dsr"), create("lb-nat", "nat")

	// The pod sees the client's own address through any node in dsr
	// mode (the answer's client), and a node's in nat mode.
	if _, err := waitAnswer(t.Context(), c.Client, dsr.LoadBalancerAddr(cluster.PortHTTP), programmed, func(a cluster.Answer) error {
		if a.Client.Addr() != cluster.ClientAddr {
			return fmt.Errorf("%s saw the client as %s, want %s", a.Pod, a.Client, cluster.ClientAddr)
		}
		return nil
	}); err != nil {
		t.Fatalf("dsr, from the client: %v", err)
	}
	if _, err := waitAnswer(t.Context(), c.Client, nat.LoadBalancerAddr(cluster.PortHTTP), programmed, through(c, c.Nodes...)); err != nil {
		t.Fatalf("nat, from the client: %v", err)
	}

	count := countVIP(t, ingressOnly, dsr.LoadBalancerIP)
	interval := flowInterval(2 * flows)
	start := func(svc *cluster.Service) *cluster.Traffic {
		tr, err := cluster.StartTraffic(t.Context(), c.Client, cluster.TrafficSpec{
			Network: "tcp", Target: svc.LoadBalancerAddr(cluster.PortTCP), Flows: flows, Interval: interval, Timeout: stallTimeout,
		})
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	dsrTr, natTr := start(dsr), start(nat)
	time.Sleep(interval + 3*time.Second)
	healthy := func(tr *cluster.Traffic) map[netip.AddrPort]bool {
		ok := map[netip.AddrPort]bool{}
		for _, f := range tr.Report().Flows {
			if f.Break == nil && !f.Established.IsZero() {
				ok[f.Local] = true
			}
		}
		return ok
	}
	dsrOK, natOK := healthy(dsrTr), healthy(natTr)
	t.Logf("before the ECMP changes: %d of %d dsr flows and %d of %d nat flows healthy", len(dsrOK), flows, len(natOK), flows)
	before := count()

	// node3 leaves the ECMP set, then joins it again; each time every
	// flow exchanges at least once more before the next change.
	if err := ingressOnly.StopDaemon(); err != nil {
		t.Fatal(err)
	}
	left := waitNextHops(t, c, dsr.LoadBalancerIP, backends, 0)
	waitNextHops(t, c, nat.LoadBalancerIP, backends, 0)
	t.Logf("%s left the ECMP set at %s", ingressOnly.Name, left.Format("15:04:05.000"))
	time.Sleep(interval + 2*time.Second)
	if err := ingressOnly.StartDaemon(t.Context()); err != nil {
		t.Fatal(err)
	}
	joined := waitNextHops(t, c, dsr.LoadBalancerIP, c.Nodes, 0)
	waitNextHops(t, c, nat.LoadBalancerIP, c.Nodes, 0)
	t.Logf("%s joined the ECMP set again at %s", ingressOnly.Name, joined.Format("15:04:05.000"))
	time.Sleep(interval + 2*time.Second)
	after := count()

	kept := func(mode string, tr *cluster.Traffic, ok map[netip.AddrPort]bool) (int, cluster.Report) {
		r := tr.Stop()
		n := 0
		for _, f := range r.Flows {
			if !ok[f.Local] {
				continue
			}
			if f.Break == nil {
				n++
				continue
			}
			in := "?"
			if x := c.NodeOf(f.Client.Addr()); x != nil {
				in = x.Name
			}
			t.Logf("%s: lost %s (pod %s saw %s, %s), %s at %s", mode, f.Local, f.Backend, f.Client, in, f.Break.Kind, f.Break.At.Format("15:04:05.000"))
		}
		return n, r
	}
	dsrKept, dsrReport := kept("dsr", dsrTr, dsrOK)
	natKept, _ := kept("nat", natTr, natOK)
	permille := func(k, of int) int {
		if of == 0 {
			return 0
		}
		return k * 1000 / of
	}
	replies := after.out - before.out
	t.Logf("ECMP changes through %s (no endpoint): dsr kept %d of %d healthy flows, nat %d of %d; through %s: %d packets to the dsr address, %d from it",
		ingressOnly.Name, dsrKept, len(dsrOK), natKept, len(natOK), ingressOnly.Name, after.in-before.in, replies)
	t.Logf("cluster-metric dsr-ecmp-flows-kept-dsr-permille=%d", permille(dsrKept, len(dsrOK)))
	t.Logf("cluster-metric dsr-ecmp-flows-kept-nat-permille=%d", permille(natKept, len(natOK)))
	t.Logf("cluster-metric dsr-ecmp-replies-through-ingress-only=%d", replies)

	if len(dsrOK) < flows*995/1000 {
		t.Errorf("dsr: only %d of %d flows healthy before any change", len(dsrOK), flows)
	}
	if dsrKept*1000 < len(dsrOK)*995 {
		t.Errorf("dsr: %d of %d flows survived a node holding no endpoint leaving and joining the ECMP set, want at least 99.5%%", dsrKept, len(dsrOK))
	}
	var masked []string
	for _, f := range dsrReport.Flows {
		if !f.Established.IsZero() && f.Client != f.Local {
			masked = append(masked, fmt.Sprintf("%s seen as %s", f.Local, f.Client))
		}
	}
	if len(masked) > 0 {
		t.Errorf("dsr: %d flows' pods did not see the client's own address and port: %s", len(masked), strings.Join(masked[:min(5, len(masked))], "; "))
	}
	if after.in == before.in {
		t.Errorf("no packet to the dsr address entered through %s: the ECMP changes did not move flows there", ingressOnly.Name)
	}
	if replies > 0 {
		t.Errorf("%d packets from the dsr address left through %s, which holds no endpoint: want none (replies leave the backend nodes)", replies, ingressOnly.Name)
	}
}

// vipCounts are a node's uplink counters of packets to (in) and from
// (out) an address.
type vipCounts struct{ in, out uint64 }

// countVIP installs counters on n's uplink (eth0) for packets to and
// from vip and returns their reader; the table goes with the test.
func countVIP(t *testing.T, n *cluster.Node, vip netip.Addr) func() vipCounts {
	t.Helper()
	const table = "dsrcount"
	tbl := &nftables.Table{Family: nftables.TableFamilyINet, Name: table}
	eth0 := make([]byte, unix.IFNAMSIZ)
	copy(eth0, "eth0")
	a := vip.As4()
	err := n.NS.Do(func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		c.AddTable(tbl)
		accept := nftables.ChainPolicyAccept
		for _, h := range []struct {
			name   string
			hook   *nftables.ChainHook
			iface  expr.MetaKey
			offset uint32
		}{
			{"in", nftables.ChainHookPrerouting, expr.MetaKeyIIFNAME, 16},
			{"out", nftables.ChainHookPostrouting, expr.MetaKeyOIFNAME, 12},
		} {
			ch := c.AddChain(&nftables.Chain{Name: h.name, Table: tbl, Type: nftables.ChainTypeFilter,
				Hooknum: h.hook, Priority: nftables.ChainPriorityRaw, Policy: &accept})
			c.AddRule(&nftables.Rule{Table: tbl, Chain: ch, Exprs: []expr.Any{
				&expr.Meta{Key: h.iface, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: eth0},
				&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: h.offset, Len: 4},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: a[:]},
				&expr.Counter{},
			}})
		}
		return c.Flush()
	})
	if err != nil {
		t.Fatalf("%s: counters: %v", n.Name, err)
	}
	t.Cleanup(func() {
		_ = n.NS.Do(func() error {
			c, err := nftables.New()
			if err != nil {
				return err
			}
			c.DelTable(tbl)
			return c.Flush()
		})
	})
	return func() vipCounts {
		var got vipCounts
		err := n.NS.Do(func() error {
			c, err := nftables.New()
			if err != nil {
				return err
			}
			for _, name := range []string{"in", "out"} {
				rules, err := c.GetRules(tbl, &nftables.Chain{Name: name, Table: tbl})
				if err != nil {
					return err
				}
				for _, r := range rules {
					for _, e := range r.Exprs {
						if ctr, ok := e.(*expr.Counter); ok {
							if name == "in" {
								got.in += ctr.Packets
							} else {
								got.out += ctr.Packets
							}
						}
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: read counters: %v", n.Name, err)
		}
		return got
	}
}
