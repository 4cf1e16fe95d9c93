package cluster

import (
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/switchyard-lb/switchyard/test/lab"
)

// TestTopologyAndTraffic checks the harness itself, without daemons, on
// a topology of its own: pods reach pods on another node over the
// host-gw routes without NAT, the traffic tool's flows survive while the
// path is there, and every one of them reports a timeout once the
// backend pod's link is down.
func TestTopologyAndTraffic(t *testing.T) {
	if os.Getenv(lab.GuestEnv) != "1" {
		t.Skipf("guest-only: runs in the kernel lab (%s=1); run `make test-cluster`", lab.GuestEnv)
	}
	topo, err := build(Plan{Nodes: 2, PodsPerNode: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer topo.Close()
	from, to := topo.Nodes[0].Pods[0], topo.Nodes[1].Pods[0]

	a, err := Get(t.Context(), from.NS, netip.AddrPortFrom(to.Addr, PodHTTPPort))
	if err != nil {
		t.Fatal(err)
	}
	if a.Pod != to.Name || a.Client.Addr() != from.Addr {
		t.Errorf("answer %+v, want %s seeing %s (no NAT between pods)", a, to.Name, from.Addr)
	}
	// The node's own address is its LAN one toward other nodes' pods.
	a, err = Get(t.Context(), topo.Nodes[0].NS, netip.AddrPortFrom(to.Addr, PodHTTPPort))
	if err != nil {
		t.Fatal(err)
	}
	if a.Client.Addr() != topo.Nodes[0].Addr {
		t.Errorf("%s saw node1 as %s, want %s", to.Name, a.Client.Addr(), topo.Nodes[0].Addr)
	}
	var flows []*Traffic
	for _, network := range []string{"tcp", "udp"} {
		tr, err := StartTraffic(t.Context(), from.NS, TrafficSpec{
			Network: network, Target: netip.AddrPortFrom(to.Addr, PodTCPPort), Flows: 5,
			Interval: 100 * time.Millisecond, Timeout: 2 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		flows = append(flows, tr)
	}
	time.Sleep(time.Second)
	for _, tr := range flows {
		if r := tr.Report(); r.Established() != 5 || r.Survived() != 5 {
			t.Errorf("%s before the break: %s; want 5 of 5", tr.spec.Network, r)
		}
	}
	cut := time.Now()
	if err := to.NS.configure(func(h *netlink.Handle) error {
		eth0, err := h.LinkByName("eth0")
		if err != nil {
			return err
		}
		return h.LinkSetDown(eth0)
	}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	for _, tr := range flows {
		r := tr.Stop()
		t.Logf("%s after the cut: %s", tr.spec.Network, r)
		if r.Established() != 5 || r.Survived() != 0 {
			t.Errorf("%s after the cut: %s; want 5 established, none surviving", tr.spec.Network, r)
		}
		for _, f := range r.Flows {
			if f.Break == nil {
				continue
			}
			if f.Break.Kind != BreakTimeout || f.Break.At.Before(cut) {
				t.Errorf("%s flow %s: break %+v, want a timeout after %s", tr.spec.Network, f.Local, *f.Break, cut.Format(time.StampMilli))
			}
		}
	}
}
