package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-lb/switchyard/test/cluster"
)

// gracefulRestartConfig is the cluster's daemon config with BGP graceful
// restart enabled on the bgp announcer (restart time 60 s).
var gracefulRestartConfig = strings.Replace(cluster.DefaultDaemonConfig,
	"      asn: 64512\n", "      asn: 64512\n      gracefulRestart: {enabled: true, restartTime: 60s}\n", 1)

// TestLoadBalancerBGPRollingRestart: a rolling restart of every daemon in
// BGP mode (SIGTERM, as the DaemonSet's update does; each daemon's path
// back at the router before the next one stops) under long-lived TCP
// flows (CLUSTER_ROLLING_FLOWS of them) through FRR's ECMP route to a LoadBalancer IP and a steady
// request rate, first with the default config (no graceful restart:
// each daemon withdraws, the router's next-hop set changes twice per
// node and rehashes flows, today's loss), then with graceful restart
// (the daemons end their sessions without a NOTIFICATION, FRR keeps
// their paths stale until the restarted daemons refresh them: the
// next-hop set never changes), then with graceful restart again but
// every daemon SIGKILLed (a crash loop: no withdrawal, no gossip leave,
// the kernel closes the sessions). It reports, for each, the flows lost (of
// those healthy when the restarts began), the requests failed and how
// often the router's next hops changed:
//
//	cluster-metric bgp-rolling-restart-flows-lost=N
//	cluster-metric bgp-rolling-restart-requests-failed=N
//	cluster-metric bgp-rolling-restart-flows-lost-gr=N
//	cluster-metric bgp-rolling-restart-requests-failed-gr=N
//	cluster-metric bgp-rolling-restart-flows-lost-gr-crash=N
//	cluster-metric bgp-rolling-restart-requests-failed-gr-crash=N
//
// With graceful restart the router's next hops must not change, no flow
// healthy when the restarts began may break and no request may fail;
// without, the losses are reported.
func TestLoadBalancerBGPRollingRestart(t *testing.T) {
	c := requireGuest(t)
	flows := rollingFlows(t)
	svc := createLB(t, c, "lb-rolling", cluster.PoolBGP, cluster.BGPPool)
	waitNextHops(t, c, svc.LoadBalancerIP, c.Nodes, 3*time.Second)
	if _, err := waitAnswer(t.Context(), c.Client, svc.LoadBalancerAddr(cluster.PortHTTP), programmed, through(c, c.Nodes...)); err != nil {
		t.Fatalf("from the client: %v", err)
	}
	t.Cleanup(func() {
		// The next suites get the cluster's config back.
		reconfigure(t, c, svc, "")
	})

	for _, run := range []struct {
		gr, crash    bool
		suffix, what string
	}{
		{false, false, "", "without graceful restart"},
		{true, false, "-gr", "with graceful restart"},
		{true, true, "-gr-crash", "with graceful restart, daemons SIGKILLed (no gossip leave)"},
	} {
		suffix, what, gr := run.suffix, run.what, run.gr
		if gr && !run.crash {
			reconfigure(t, c, svc, gracefulRestartConfig)
		}
		lost, healthy, failed, sent, changes := rollBGP(t, c, svc, flows, run.crash)
		t.Logf("rolling restart %s: %d of %d flows healthy when it began lost, %d of %d requests failed; the router's next hops changed %d times: %v",
			what, lost, healthy, len(failed), sent, len(changes), changes)
		if len(failed) > 0 {
			t.Logf("first failed requests %s: %v", what, failed[:min(5, len(failed))])
		}
		t.Logf("cluster-metric bgp-rolling-restart-flows-lost%s=%d", suffix, lost)
		t.Logf("cluster-metric bgp-rolling-restart-requests-failed%s=%d", suffix, len(failed))
		if !gr {
			continue // today's loss: reported
		}
		if len(changes) > 0 {
			logBGPEvidence(t, c)
			t.Errorf("%s the router's next hops changed during the rolling restart: %v", what, changes)
		}
		if lost > 0 || len(failed) > 0 {
			t.Errorf("%s a rolling restart lost %d of %d flows and failed %d of %d requests, want none", what, lost, healthy, len(failed), sent)
		}
	}
}

// rollBGP restarts every node's daemon (SIGTERM, or SIGKILL for a
// crash), one after another, under flows
// and requests to svc's LoadBalancer IP from the client, and returns the
// flows lost of those healthy when the restarts began (flows reset
// before are TestLoadBalancerBGP's open finding, logged), the failed and
// sent requests, and every change of the router's next hops meanwhile.
// Each lost flow is logged with the node it entered through and the
// restart it broke during.
func rollBGP(t *testing.T, c *cluster.Cluster, svc *cluster.Service, flows int, crash bool) (lost, healthy int, failed []string, sent int, changes []string) {
	t.Helper()
	stop := make(chan struct{})
	watched := watchNextHops(c, svc.LoadBalancerIP, stop)
	load := startRollingLoad(t, c, svc, flows)
	ok := load.healthy
	type restart struct {
		node    string
		stopped time.Time
	}
	var restarts []restart
	for _, n := range c.Nodes {
		stopped := time.Now()
		restarts = append(restarts, restart{n.Name, stopped})
		halt := n.StopDaemon
		if crash {
			halt = n.KillDaemon
		}
		if err := halt(); err != nil {
			t.Fatal(err)
		}
		if err := n.StartDaemon(t.Context()); err != nil {
			t.Fatal(err)
		}
		ready := time.Since(stopped)
		waitRefreshed(t, c, svc.LoadBalancerIP, n)
		t.Logf("%s's daemon stopped at %s, ready in %s, its path refreshed at the router in %s", n.Name, stopped.Format("15:04:05.000"),
			ready.Round(time.Millisecond), time.Since(stopped).Round(time.Millisecond))
	}
	// Every flow exchanges at least once more after the last restart.
	time.Sleep(load.interval + 2*time.Second)
	close(stop)
	changes = <-watched
	sent, failed = load.reqs.stop()
	r := load.tr.Stop()
	t.Logf("flows: %s", r)
	for _, f := range r.Flows {
		if !ok[f.Local] || f.Break == nil {
			continue
		}
		lost++
		during := "before the first restart"
		for _, x := range restarts {
			if !f.Break.At.Before(x.stopped) {
				during = "after " + x.node + "'s daemon stopped"
			}
		}
		in := "?"
		if n := c.NodeOf(f.Client.Addr()); n != nil {
			in = n.Name
		}
		t.Logf("lost: %s entering through %s, %s at %s %s", f.Local, in, f.Break.Kind, f.Break.At.Format("15:04:05.000"), during)
	}
	return lost, len(ok), failed, sent, changes
}

// reconfigure restarts every daemon with cfg ("" the cluster's), each
// one's path back at the router before the next, with no traffic
// measured.
func reconfigure(t *testing.T, c *cluster.Cluster, svc *cluster.Service, cfg string) {
	t.Helper()
	restartEach(t, c, cfg, func(n *cluster.Node) { waitRefreshed(t, c, svc.LoadBalancerIP, n) })
}

// restartEach restarts every daemon with cfg ("" the cluster's), one
// after another, calling back before the next stops.
func restartEach(t *testing.T, c *cluster.Cluster, cfg string, back func(*cluster.Node)) {
	t.Helper()
	for _, n := range c.Nodes {
		n.SetDaemonConfig(cfg)
		if err := n.StopDaemon(); err != nil {
			t.Fatal(err)
		}
		// Not t.Context(): this runs in cleanups too.
		if err := n.StartDaemon(context.Background()); err != nil {
			t.Fatal(err)
		}
		back(n)
	}
}

// waitRefreshed waits until the router's BGP table has a path to ip
// from every node, none of them stale, and n's session is established:
// n's restarted daemon has sent its routes and its End-of-RIB.
func waitRefreshed(t *testing.T, c *cluster.Cluster, ip netip.Addr, n *cluster.Node) {
	t.Helper()
	deadline := time.Now().Add(moved)
	for {
		// Not t.Context(): reconfigure runs in a cleanup too.
		err := refreshed(context.Background(), c, ip, n)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's daemon restarted: %v after %s", n.Name, err, moved)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func refreshed(ctx context.Context, c *cluster.Cluster, ip netip.Addr, n *cluster.Node) error {
	hops, stale, err := frrPaths(ctx, c, ip)
	if err != nil {
		return err
	}
	var want []string
	for _, x := range c.Nodes {
		want = append(want, x.Addr.String())
	}
	slices.Sort(want)
	if !slices.Equal(hops, want) || len(stale) > 0 {
		return fmt.Errorf("FRR's paths to %s via %v (stale: %v), want fresh ones via %v", ip, hops, stale, want)
	}
	neighbor, err := c.FRR.Vtysh(ctx, "show bgp neighbor "+n.Addr.String()+" json")
	if err != nil {
		return err
	}
	if !strings.Contains(neighbor, `"bgpState":"Established"`) {
		return fmt.Errorf("FRR's session with %s is not established", n.Name)
	}
	return nil
}

// frrPaths returns the next hops of FRR's BGP paths to ip, sorted, and
// those of them that are stale (kept for a peer in graceful restart).
func frrPaths(ctx context.Context, c *cluster.Cluster, ip netip.Addr) (hops, stale []string, err error) {
	out, err := c.FRR.Vtysh(ctx, "show bgp ipv4 unicast "+ip.String()+"/32 json")
	if err != nil {
		return nil, nil, err
	}
	var route struct {
		Paths []struct {
			Stale    bool `json:"stale"`
			Nexthops []struct {
				IP string `json:"ip"`
			} `json:"nexthops"`
		} `json:"paths"`
	}
	if err := json.Unmarshal([]byte(out), &route); err != nil {
		return nil, nil, fmt.Errorf("decoding FRR's route %q: %w", out, err)
	}
	for _, p := range route.Paths {
		for _, h := range p.Nexthops {
			hops = append(hops, h.IP)
			if p.Stale {
				stale = append(stale, h.IP)
			}
		}
	}
	slices.Sort(hops)
	return hops, stale, nil
}

// logBGPEvidence logs what explains a change of the router's next hops:
// FRR's neighbour changes and every daemon's BGP, membership and
// announcement lines, warnings and errors, of every run.
func logBGPEvidence(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	frr := c.FRR.LogLines(func(l string) bool {
		return strings.Contains(l, "ADJCHANGE") || strings.Contains(l, "otification") || strings.Contains(l, "Hold") ||
			strings.Contains(l, "graceful") || strings.Contains(l, "Graceful") || strings.Contains(l, "stale")
	})
	t.Logf("FRR's neighbour changes (%d lines):\n%s", len(frr), strings.Join(frr, "\n"))
	for _, n := range c.Nodes {
		lines := n.DaemonLogLines(func(l string) bool {
			for _, w := range []string{"level=WARN", "level=ERROR", "Peer", "peer", "bgp", "announce", "withdr", "membership", "cluster lab:"} {
				if strings.Contains(l, w) {
					return true
				}
			}
			return false
		})
		t.Logf("%s's daemon, BGP and membership (%d lines):\n%s", n.Name, len(lines), strings.Join(lines, "\n"))
	}
}
