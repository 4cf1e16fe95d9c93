package cluster_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-lb/switchyard/test/cluster"
)

// withoutRestartGrace returns cfg with membership.restartGrace 0s: a
// restarting daemon leaves gossip as a node going away does.
func withoutRestartGrace(cfg string) string {
	if strings.Contains(cfg, "\nmembership:\n") {
		return strings.Replace(cfg, "\nmembership:\n", "\nmembership:\n  restartGrace: 0s\n", 1)
	}
	return cfg + "membership:\n  restartGrace: 0s\n"
}

// TestLoadBalancerLayer2RollingRestart (issue 13's done-when, layer 2):
// a rolling restart of every daemon (SIGTERM, as the DaemonSet's update
// does; the next one stops once every daemon gossips with the restarted
// one again) under long-lived TCP flows from the client, through the
// router, to a layer-2 LoadBalancer IP (CLUSTER_ROLLING_FLOWS of them)
// and a request every 100 ms; with the default restart grace (the
// owner says it restarts, the others keep its address on its node, whose
// dataplane keeps forwarding), then, with CLUSTER_L2_NO_GRACE=1 (`make
// bench-cluster`), without it (membership.restartGrace: 0s: the owner's
// daemon leaves gossip, the others take its address, and it takes it
// back once restarted, each move resetting the flows that cross it), to
// show what the grace prevents. It reports, for each:
//
//	cluster-metric l2-rolling-restart-flows-lost[-no-grace]=N
//	cluster-metric l2-rolling-restart-requests-failed[-no-grace]=N
//	cluster-metric l2-rolling-restart-owner-changes[-no-grace]=N
//
// With the grace the router must resolve the address to the same node
// throughout, no flow healthy when the restarts began may break and no
// request may fail; without, the losses are reported.
func TestLoadBalancerLayer2RollingRestart(t *testing.T) {
	c := requireGuest(t)
	flows := rollingFlows(t)
	svc := createLB(t, c, "lb-l2-rolling", cluster.PoolL2, cluster.L2Pool)
	if _, err := waitAnswer(t.Context(), c.Client, svc.LoadBalancerAddr(cluster.PortHTTP), programmed, func(cluster.Answer) error { return nil }); err != nil {
		t.Fatalf("from the client: %v", err)
	}
	config := ""
	t.Cleanup(func() {
		if config != "" { // the next suites get the cluster's config back
			reconfigureL2(t, c, "")
		}
	})
	type l2Run struct {
		grace        bool
		suffix, what string
	}
	runs := []l2Run{{true, "", "with the restart grace"}}
	if os.Getenv(envL2NoGrace) == "1" {
		runs = append(runs, l2Run{false, "-no-grace", "without the restart grace"})
	}
	for _, run := range runs {
		want := withoutRestartGrace(c.DaemonConfig())
		if run.grace {
			want = ""
		}
		if want != config {
			reconfigureL2(t, c, want)
			config = want
			// The last daemon restarted waits the guard's window before
			// it answers for its addresses; meanwhile another node
			// stands in, and the address moves back once it ends.
			time.Sleep(guardWindow)
		}
		owner := l2Owner(t, c, svc)
		r := rollL2(t, c, svc, flows)
		t.Logf("rolling restart %s (%s owned %s): %d of %d flows healthy when it began lost, %d of %d requests failed; the router's neighbour entry changed %d times: %v",
			run.what, owner.Name, svc.LoadBalancerIP, r.lost, r.healthy, len(r.failed), r.sent, len(r.changes), r.changes)
		if len(r.failed) > 0 {
			t.Logf("first failed requests %s: %v", run.what, r.failed[:min(5, len(r.failed))])
		}
		t.Logf("cluster-metric l2-rolling-restart-flows-lost%s=%d", run.suffix, r.lost)
		t.Logf("cluster-metric l2-rolling-restart-requests-failed%s=%d", run.suffix, len(r.failed))
		t.Logf("cluster-metric l2-rolling-restart-owner-changes%s=%d", run.suffix, len(r.changes))
		if !run.grace {
			continue // today's loss: reported
		}
		if len(r.changes) > 0 {
			t.Errorf("%s the router's neighbour entry for %s changed during the rolling restart: %v", run.what, svc.LoadBalancerIP, r.changes)
		}
		if r.lost > 0 || len(r.failed) > 0 {
			t.Errorf("%s a rolling restart lost %d of %d flows and failed %d of %d requests, want none", run.what, r.lost, r.healthy, len(r.failed), r.sent)
		}
	}
}

// guardWindow is longer than the quorum guard's window with the lab's
// tolerant gossip timing (2 x 4 x 1s), which a daemon waits after its
// start before it answers for its layer-2 addresses.
const guardWindow = 10 * time.Second

// rolled is what a rolling restart under traffic did.
type rolled struct {
	lost, healthy int
	failed        []string
	sent          int
	changes       []string
}

// rollL2 restarts every node's daemon (SIGTERM), one after another,
// under flows and requests from the client to svc's LoadBalancer IP,
// each restarted daemon back in every daemon's gossip, and a few seconds
// more, before the next stops; and returns the flows lost of those
// healthy when the restarts began, the failed and sent requests and
// every change of the router's neighbour entry for the address.
func rollL2(t *testing.T, c *cluster.Cluster, svc *cluster.Service, flows int) rolled {
	t.Helper()
	stop := make(chan struct{})
	watched := watchNeighbour(c, svc.LoadBalancerIP, stop)
	load := startRollingLoad(t, c, svc, flows)
	for _, n := range c.Nodes {
		stopped := time.Now()
		if err := n.StopDaemon(); err != nil {
			t.Fatal(err)
		}
		if err := n.StartDaemon(t.Context()); err != nil {
			t.Fatal(err)
		}
		ready := time.Since(stopped)
		waitGossip(t, c)
		t.Logf("%s's daemon stopped at %s, ready in %s, in every daemon's gossip again in %s", n.Name, stopped.Format("15:04:05.000"),
			ready.Round(time.Millisecond), time.Since(stopped).Round(time.Millisecond))
		time.Sleep(2 * time.Second) // its first syncs, under traffic
	}
	// Every flow exchanges at least once more after the last restart.
	time.Sleep(load.interval + 2*time.Second)
	close(stop)
	r := rolled{changes: <-watched, healthy: len(load.healthy)}
	r.sent, r.failed = load.reqs.stop()
	rep := load.tr.Stop()
	t.Logf("flows: %s", rep)
	for _, f := range rep.Flows {
		if load.healthy[f.Local] && f.Break != nil {
			r.lost++
		}
	}
	return r
}

// reconfigureL2 restarts every daemon with cfg ("" the cluster's), each
// one back in every daemon's gossip before the next, with no traffic
// measured.
func reconfigureL2(t *testing.T, c *cluster.Cluster, cfg string) {
	t.Helper()
	restartEach(t, c, cfg, func(*cluster.Node) { waitGossip(t, c) })
}

// waitGossip waits until every node's daemon counts every daemon alive
// in its gossip (switchyard_membership_members), bounded by moved.
func waitGossip(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	deadline := time.Now().Add(moved)
	for {
		var err error
		for _, n := range c.Nodes {
			var got int
			if got, err = membersAlive(n); err == nil && got != len(c.Nodes) {
				err = fmt.Errorf("%s's daemon counts %d daemons alive, want %d", n.Name, got, len(c.Nodes))
			}
			if err != nil {
				break
			}
		}
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gossip: %v after %s", err, moved)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// membersAlive reads n's daemon's switchyard_membership_members.
func membersAlive(n *cluster.Node) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	const name = "switchyard_membership_members"
	m, err := n.DaemonMetrics(ctx, name)
	if err != nil {
		return 0, err
	}
	return int(m[name]), nil
}

// watchNeighbour records every change of the node the router resolves ip
// to, until stop is closed.
func watchNeighbour(c *cluster.Cluster, ip netip.Addr, stop <-chan struct{}) <-chan []string {
	out := make(chan []string, 1)
	name := func() string {
		mac, err := c.RouterNeighbour(ip)
		if err != nil || mac == nil {
			return ""
		}
		if n := c.NodeByMAC(mac); n != nil {
			return n.Name
		}
		return mac.String()
	}
	go func() {
		var changes []string
		last := name()
		for {
			select {
			case <-stop:
				out <- changes
				return
			case <-time.After(50 * time.Millisecond):
			}
			// No entry (expired, or being resolved) is no change.
			if got := name(); got != "" && got != last {
				changes = append(changes, fmt.Sprintf("%s: %s", time.Now().Format(time.StampMilli), got))
				last = got
			}
		}
	}()
	return out
}
