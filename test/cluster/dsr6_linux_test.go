package cluster_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-lb/switchyard/test/cluster"
)

// TestDSRIPv6ClientAddress: an IPv6 client reaches an IPv6 LoadBalancer
// address in dsr mode through FRR's IPv6 ECMP route over the three nodes
// (each node's daemon announcing it over its IPv6 session), with pods on
// node1 and node2 only, so that the flows entering through node3, and
// those entering through one backend node that the table gives the
// other, cross the nodes' LAN in ip6ip6 tunnels. Every TCP and UDP flow's
// pod must have seen the client's own IPv6 address and port (issue 12:
// "client source IP visible at the pod in resilient mode, for TCP, UDP
// and IPv6"), some packets to the address must have entered through
// node3, and none from it left there (replies leave the backend nodes).
// A nat-mode IPv6 Service over the same pods is the control: its pods
// see a node's address (externalTrafficPolicy Cluster masquerades), so
// the client address check can fail.
func TestDSRIPv6ClientAddress(t *testing.T) {
	c := requireGuest(t)
	if len(c.Nodes) < 3 {
		t.Fatalf("%d nodes: want 3 (two backend nodes, one ingress only)", len(c.Nodes))
	}
	backends, ingressOnly := c.Nodes[:2], c.Nodes[2]
	create := func(name, mode string) *cluster.Service {
		svc := createModeLBSpec(t, c, cluster.ServiceSpec{Name: name, Pool: cluster.PoolBGP, IPv6: true}, mode,
			backends[0].Pods[0], backends[1].Pods[0])
		if !cluster.BGPPool6.Contains(svc.LoadBalancerIP) {
			t.Fatalf("%s: LoadBalancer IP %s, want one of the bgp pool's IPv6 range %s", name, svc.LoadBalancerIP, cluster.BGPPool6)
		}
		return svc
	}
	dsr, nat := create("lb6-dsr", "dsr"), create("lb6-nat", "nat")
	for _, svc := range []*cluster.Service{dsr, nat} {
		waitNextHops(t, c, svc.LoadBalancerIP, c.Nodes, 3*time.Second)
	}
	if _, err := waitAnswer(t.Context(), c.Client, nat.LoadBalancerAddr(cluster.PortHTTP), programmed, through(c, c.Nodes...)); err != nil {
		t.Fatalf("nat (the control), from the client: %v", err)
	}
	if _, err := waitAnswer(t.Context(), c.Client, dsr.LoadBalancerAddr(cluster.PortHTTP), programmed, sawClient(cluster.ClientAddr6)); err != nil {
		t.Fatalf("dsr, from the client: %v", err)
	}

	count := countVIP(t, ingressOnly, dsr.LoadBalancerIP)
	before := count()
	const tcpFlows, udpFlows = 30, 20
	guestCapacity(t, tcpFlows+udpFlows)
	start := func(network string, port string, flows int, timeout time.Duration) *cluster.Traffic {
		tr, err := cluster.StartTraffic(t.Context(), c.Client, cluster.TrafficSpec{
			Network: network, Target: dsr.LoadBalancerAddr(port), Flows: flows, Interval: time.Second, Timeout: timeout,
		})
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	tcp := start("tcp", cluster.PortTCP, tcpFlows, stallTimeout)
	udp := start("udp", cluster.PortUDP, udpFlows, cluster.RequestTimeout)
	// Every flow (answered once: StartTraffic) answers a few more times.
	time.Sleep(5 * time.Second)
	tcpReport, udpReport := tcp.Stop(), udp.Stop()
	after := count()
	t.Logf("dsr over IPv6: TCP %s; UDP %s; through %s (no endpoint): %d packets to the dsr address, %d from it",
		tcpReport, udpReport, ingressOnly.Name, after.in-before.in, after.out-before.out)
	for _, r := range []struct {
		network string
		report  cluster.Report
		flows   int
	}{{"TCP", tcpReport, tcpFlows}, {"UDP", udpReport, udpFlows}} {
		if r.report.Established() != r.flows || r.report.Survived() != r.flows {
			t.Errorf("dsr over IPv6, %s: %s; want all %d flows answered throughout", r.network, r.report, r.flows)
		}
		var masked []string
		for _, f := range r.report.Flows {
			// A UDP flow's Local is its unconnected socket's ([::] and
			// its port): compare the port only.
			if f.Established.IsZero() || f.Client.Addr() == cluster.ClientAddr6 && f.Client.Port() == f.Local.Port() {
				continue
			}
			masked = append(masked, fmt.Sprintf("%s seen by %s as %s", f.Local, f.Backend, f.Client))
		}
		if len(masked) > 0 {
			t.Errorf("dsr over IPv6, %s: %d flows' pods did not see the client's own address and port: %s",
				r.network, len(masked), strings.Join(masked[:min(5, len(masked))], "; "))
		}
	}
	if after.in == before.in {
		t.Errorf("no packet to the dsr address entered through %s: the router's IPv6 ECMP sent no flow there, so none was tunnelled from it", ingressOnly.Name)
	}
	if after.out != before.out {
		t.Errorf("%d packets from the dsr address left through %s, which holds no endpoint: want none (replies leave the backend nodes)", after.out-before.out, ingressOnly.Name)
	}
}
