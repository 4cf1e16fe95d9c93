package cluster_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchyard-lb/switchyard/test/cluster"
)

// moved bounds how long a LoadBalancer address may take to move or a
// route to change after a node fails (the claims are about a second;
// waits bound failures only).
const moved = 2 * time.Minute

// metric logs one measurement in the format `make bench-cluster` reads:
// "cluster-metric NAME=MILLISECONDS".
func metric(t *testing.T, name string, d time.Duration) {
	t.Helper()
	t.Logf("cluster-metric %s=%d", name, d.Milliseconds())
}

// failoverReaction is what a layer-2 failover takes beyond the gossip's
// bound (Cluster.FailoverBound): the new owner's sync that takes the
// address and its gratuitous ARP, and the client's next probe, 100 ms
// on. The bound and it are the claim the README makes of a failover.
const failoverReaction = 250 * time.Millisecond

// failoverMargin is how far over the claim the median of the measured
// failovers may be before `make bench-cluster` fails: three nodes share
// the lab guest's one emulated CPU.
const failoverMargin = 1.5

// claimBound logs, for `make bench-cluster` (test/cluster/metrics/metrics.awk,
// which fails when the median of a measurement is over its bound), the
// failover claim with its margin as the bound of each named measurement:
// "cluster-bound NAME=MILLISECONDS". The suites themselves bound waits
// only, for failures, never speed: a loaded machine must not fail them.
func claimBound(t *testing.T, c *cluster.Cluster, names ...string) {
	t.Helper()
	b, err := c.FailoverBound()
	if err != nil {
		t.Fatal(err)
	}
	claim := b + failoverReaction
	for _, name := range names {
		t.Logf("cluster-bound %s=%d (the claim, gossip's %s and %s, with a margin of %.1fx)",
			name, time.Duration(float64(claim)*failoverMargin).Milliseconds(), b, failoverReaction, failoverMargin)
	}
}

// createLB creates a LoadBalancer Service (externalTrafficPolicy
// Cluster) in pool with one endpoint on every node, waits for its
// address and checks it is in want.
func createLB(t *testing.T, c *cluster.Cluster, name, pool string, want netip.Prefix) *cluster.Service {
	t.Helper()
	var eps []cluster.Endpoint
	for _, n := range c.Nodes {
		eps = append(eps, cluster.Endpoint{Pod: n.Pods[0]})
	}
	svc, err := c.CreateService(t.Context(), namespace(t, c), cluster.ServiceSpec{
		Name: name, Type: corev1.ServiceTypeLoadBalancer, Pool: pool, Endpoints: eps,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Frees the address for the next run (go test -count).
		if err := c.DeleteService(context.Background(), svc); err != nil {
			t.Error(err)
		}
	})
	ip, err := c.WaitLoadBalancerIP(t.Context(), svc, programmed)
	if err != nil {
		t.Fatal(err)
	}
	if !want.Contains(ip) {
		t.Fatalf("LoadBalancer IP %s, want one of pool %s (%s)", ip, pool, want)
	}
	return svc
}

// ingress is the node that forwarded a request: with
// externalTrafficPolicy Cluster it masquerades, so the pod saw one of its
// addresses as the client.
func ingress(c *cluster.Cluster, a cluster.Answer) (*cluster.Node, error) {
	n := c.NodeOf(a.Client.Addr())
	if n == nil {
		return nil, fmt.Errorf("%s saw the client as %s, no node's address (not masqueraded?)", a.Pod, a.Client.Addr())
	}
	return n, nil
}

// through accepts answers forwarded by one of nodes.
func through(c *cluster.Cluster, nodes ...*cluster.Node) func(cluster.Answer) error {
	return func(a cluster.Answer) error {
		n, err := ingress(c, a)
		if err != nil {
			return err
		}
		if !slices.Contains(nodes, n) {
			return fmt.Errorf("forwarded by %s, want one of %v", n.Name, names(nodes))
		}
		return nil
	}
}

func names(nodes []*cluster.Node) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.Name)
	}
	return out
}

func others(c *cluster.Cluster, n *cluster.Node) []*cluster.Node {
	var out []*cluster.Node
	for _, o := range c.Nodes {
		if o != n {
			out = append(out, o)
		}
	}
	return out
}

// l2Owner returns the node that owns the layer-2 address: the one the
// router resolves it to, through which every one of several requests
// from the client enters. The daemons' gossip can flap on a starved
// machine and move the address meanwhile; l2Owner waits until the owner
// holds (bounded by moved) and logs how often it changed.
func l2Owner(t *testing.T, c *cluster.Cluster, svc *cluster.Service) *cluster.Node {
	t.Helper()
	deadline := time.Now().Add(moved)
	target := svc.LoadBalancerAddr(cluster.PortHTTP)
	changes := 0
	var last *cluster.Node
	var why error
	for {
		owner, err := routerOwner(t, c, svc)
		if err == nil && owner != last {
			if last != nil {
				changes++
			}
			last = owner
		}
		for i := 0; err == nil && i < 6; i++ {
			var a cluster.Answer
			if a, err = cluster.Get(t.Context(), c.Client, target); err == nil {
				err = through(c, owner)(a)
			}
		}
		if err == nil {
			if again, err := routerOwner(t, c, svc); err == nil && again == owner {
				if changes > 0 {
					t.Logf("the owner of %s moved %d time(s) before it held", svc.LoadBalancerIP, changes)
				}
				return owner
			}
		}
		why = err
		if time.Now().After(deadline) {
			t.Fatalf("no node held %s for six requests within %s (changed %d times): %v", svc.LoadBalancerIP, moved, changes, why)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// routerOwner is the node the router resolves the Service's address to,
// once the router reached it (which refreshes its neighbour entry).
func routerOwner(t *testing.T, c *cluster.Cluster, svc *cluster.Service) (*cluster.Node, error) {
	t.Helper()
	if _, err := cluster.Get(t.Context(), c.Router, svc.LoadBalancerAddr(cluster.PortHTTP)); err != nil {
		return nil, err
	}
	mac, err := c.RouterNeighbour(svc.LoadBalancerIP)
	if err != nil {
		t.Fatal(err)
	}
	if mac == nil {
		return nil, fmt.Errorf("the router has no neighbour entry for %s", svc.LoadBalancerIP)
	}
	n := c.NodeByMAC(mac)
	if n == nil {
		t.Fatalf("the router resolves %s to %s, no node's MAC", svc.LoadBalancerIP, mac)
	}
	return n, nil
}

// waitNeighbour waits until the router resolves ip to a node other than
// old and returns it with the time it saw the change.
func waitNeighbour(t *testing.T, c *cluster.Cluster, ip netip.Addr, old *cluster.Node) (*cluster.Node, time.Time) {
	t.Helper()
	deadline := time.Now().Add(moved)
	for {
		mac, err := c.RouterNeighbour(ip)
		if err != nil {
			t.Fatal(err)
		}
		if n := c.NodeByMAC(mac); mac != nil && n != nil && n != old {
			return n, time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("the router still resolves %s to %s (%v) after %s", ip, old.Name, mac, moved)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// watchService records every update of the Service (time, resource
// version, status and annotations) until t ends, for a failure's
// explanation; the returned func reads them.
func watchService(t *testing.T, c *cluster.Cluster, svc *cluster.Service) func() []string {
	var mu sync.Mutex
	var seen []string
	w, err := c.Kube.CoreV1().Services(svc.Namespace).Watch(t.Context(), metav1.ListOptions{FieldSelector: "metadata.name=" + svc.Name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	go func() {
		for ev := range w.ResultChan() {
			s, ok := ev.Object.(*corev1.Service)
			if !ok {
				continue
			}
			mu.Lock()
			seen = append(seen, fmt.Sprintf("%s %s rv=%s status=%+v ann=%v", time.Now().Format("15:04:05.000"), ev.Type, s.ResourceVersion, s.Status, s.Annotations))
			mu.Unlock()
		}
	}()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

// brokenByIngress lists the broken flows of r by the node they entered
// through, with their break times, for a failure's explanation.
func brokenByIngress(c *cluster.Cluster, r cluster.Report) string {
	by := map[string][]string{}
	for _, f := range r.Flows {
		if f.Break == nil {
			continue
		}
		in := "?"
		if n := c.NodeOf(f.Client.Addr()); n != nil {
			in = n.Name
		}
		by[in] = append(by[in], fmt.Sprintf("%s->%s %s@%s", f.Local, f.Backend, f.Break.Kind, f.Break.At.Format("15:04:05.000")))
	}
	return fmt.Sprint(by)
}

// waitNextHops waits until the router's route to ip has exactly the LAN
// addresses of nodes (of ip's family) as next hops, and has kept them
// for hold, and returns when it first saw them.
func waitNextHops(t *testing.T, c *cluster.Cluster, ip netip.Addr, nodes []*cluster.Node, hold time.Duration) time.Time {
	t.Helper()
	var want []netip.Addr
	for _, n := range nodes {
		if ip.Is6() {
			want = append(want, n.Addr6)
			continue
		}
		want = append(want, n.Addr)
	}
	slices.SortFunc(want, netip.Addr.Compare)
	deadline := time.Now().Add(moved)
	var since time.Time
	for {
		got, err := nextHops(c, ip)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case !slices.Equal(got, want):
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
		}
		if !since.IsZero() && time.Since(since) >= hold {
			return since
		}
		if time.Now().After(deadline) {
			t.Fatalf("the router's route to %s has next hops %v after %s, want %v for %s", ip, got, moved, want, hold)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// nextHops are the router's next hops to ip, sorted.
func nextHops(c *cluster.Cluster, ip netip.Addr) ([]netip.Addr, error) {
	got, err := c.RouterNextHops(netip.PrefixFrom(ip, ip.BitLen()))
	slices.SortFunc(got, netip.Addr.Compare)
	return got, err
}

// watchNextHops records every change of the router's next hops to ip,
// in the kernel's order (which decides where a hash-threshold ECMP route
// sends a flow), until stop is closed, for a failure's explanation.
func watchNextHops(c *cluster.Cluster, ip netip.Addr, stop <-chan struct{}) <-chan []string {
	out := make(chan []string, 1)
	go func() {
		var changes []string
		last, _ := c.RouterNextHops(netip.PrefixFrom(ip, 32))
		for {
			select {
			case <-stop:
				out <- changes
				return
			case <-time.After(50 * time.Millisecond):
			}
			got, err := c.RouterNextHops(netip.PrefixFrom(ip, 32))
			if err == nil && !slices.Equal(got, last) {
				change := fmt.Sprintf("%s: %v", time.Now().Format(time.StampMilli), got)
				if c.FRR != nil {
					// What FRR's BGP table held then: which path went.
					hops, stale, err := frrPaths(context.Background(), c, ip)
					change += fmt.Sprintf(" (FRR's paths via %v, stale %v, %v)", hops, stale, err)
				}
				changes = append(changes, change)
				last = got
			}
		}
	}()
	return out
}

// TestLoadBalancerBGP: a LoadBalancer IP of the BGP pool is announced by
// every node; FRR installs one ECMP route over all of them and spreads
// the client's flows by their ports. Killing one node's daemon removes
// its next hop (time measured); new connections are answered through the
// other nodes, and long-lived flows through them keep working, except
// those the router's rehash moved (issue 12), counted.
//
// What survives is reported (cluster-metric lines), not asserted: on the
// loaded lab machine, established flows through every node were often
// reset before any failure while the router's route, its next hops'
// order and the Service stayed the same (an open finding, more often
// right after a daemon restart, which is why this suite runs before the
// ones that restart daemons).
func TestLoadBalancerBGP(t *testing.T) {
	c := requireGuest(t)
	created := time.Now()
	svc := createLB(t, c, "lb-bgp", cluster.PoolBGP, cluster.BGPPool)
	updates := watchService(t, c, svc)
	at := waitNextHops(t, c, svc.LoadBalancerIP, c.Nodes, 3*time.Second)
	metric(t, "bgp-ecmp-ms", at.Sub(created))
	target := svc.LoadBalancerAddr(cluster.PortHTTP)
	if _, err := waitAnswer(t.Context(), c.Client, target, programmed, through(c, c.Nodes...)); err != nil {
		t.Fatalf("from the client: %v", err)
	}

	const flows = 60
	tr, err := cluster.StartTraffic(t.Context(), c.Client, cluster.TrafficSpec{
		Network: "tcp", Target: svc.LoadBalancerAddr(cluster.PortTCP), Flows: flows, Timeout: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	changes := watchNextHops(c, svc.LoadBalancerIP, stop)
	time.Sleep(2 * time.Second)
	close(stop)
	before := tr.Report()
	perNode := map[*cluster.Node][]netip.AddrPort{}
	for _, f := range before.Flows {
		if f.Established.IsZero() {
			continue
		}
		n := c.NodeOf(f.Client.Addr())
		if n == nil {
			t.Fatalf("flow %s: the pod saw the client as %s, no node's address", f.Local, f.Client)
		}
		perNode[n] = append(perNode[n], f.Local)
	}
	// Flows broken before any failure are an open finding (see above):
	// reported, and left out of what the withdrawal is judged by.
	healthy := map[netip.AddrPort]bool{}
	for _, f := range before.Flows {
		if f.Break == nil && !f.Established.IsZero() {
			healthy[f.Local] = true
		}
	}
	if len(healthy) != flows {
		t.Logf("before any failure: %s; %d of %d flows healthy (the router's next hops changed meanwhile: %v; broken flows by ingress node: %s; Service updates: %v)",
			before, len(healthy), flows, <-changes, brokenByIngress(c, before), updates())
	}
	t.Logf("cluster-metric bgp-flows-broken-before-kill=%d", flows-len(healthy))
	for _, n := range c.Nodes {
		t.Logf("%d flows enter through %s", len(perNode[n]), n.Name)
		if len(perNode[n]) == 0 {
			t.Errorf("no flow of %d enters through %s: the router does not spread flows by port", flows, n.Name)
		}
	}

	victim := c.Nodes[len(c.Nodes)-1]
	survivors := others(c, victim)
	killed := time.Now()
	if err := victim.KillDaemon(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := victim.StartDaemon(context.Background()); err != nil {
			t.Error(err)
			return
		}
		waitNextHops(t, c, svc.LoadBalancerIP, c.Nodes, 0)
	})
	at = waitNextHops(t, c, svc.LoadBalancerIP, survivors, 0)
	metric(t, "bgp-withdraw-kill-ms", at.Sub(killed))
	for range 6 {
		if _, err := waitAnswer(t.Context(), c.Client, target, 10*time.Second, through(c, survivors...)); err != nil {
			t.Errorf("a new connection after the withdrawal: %v", err)
		}
	}
	time.Sleep(3 * time.Second)
	r := tr.Stop()
	onVictim := map[netip.AddrPort]bool{}
	for _, l := range perNode[victim] {
		onVictim[l] = true
	}
	var kept, keptTotal, lost int
	for _, f := range r.Flows {
		switch {
		case !healthy[f.Local]:
		case onVictim[f.Local]:
			if f.Break != nil {
				lost++
			}
		default:
			keptTotal++
			if f.Break == nil {
				kept++
			}
		}
	}
	t.Logf("after %s's daemon was killed at %s (withdrawn at %s): %s; of the flows healthy then, through %s: %d broke; through the others: %d of %d survived (the rest moved by the router's rehash)",
		victim.Name, killed.Format("15:04:05.000"), at.Format("15:04:05.000"), r, victim.Name, lost, kept, keptTotal)
	if keptTotal > 0 {
		t.Logf("cluster-metric bgp-survivor-flows-kept-pct=%d", 100*kept/keptTotal)
	}
	if keptTotal > 0 && kept == 0 {
		// Reported, not failed, while the resets above are open.
		t.Logf("none of the %d healthy flows through the surviving nodes survived: %s", keptTotal, brokenByIngress(c, r))
	}
}

// TestLoadBalancerLayer2: a LoadBalancer IP of the layer-2 pool is
// reachable from the router and, through it, from the client; the router
// resolves it to one elected node, which forwards every request. When
// that node's daemon is killed (CLUSTER_L2_KILLS times in a row), or its
// LAN link cut, the address moves to another node and the client is
// answered through it again: the time from the failure to that first
// answer is measured, and bounded by moved (2 minutes: with the lab's
// tolerant gossip the expected time is about 13.5 s, and 21.5 s when no
// second daemon confirms the suspicion; the bound is there for failures,
// not speed). The claim, with its margin, is logged for make
// bench-cluster, which fails when the median of its failovers is over it
// (claimBound).
func TestLoadBalancerLayer2(t *testing.T) {
	c := requireGuest(t)
	claimBound(t, c, "l2-failover-kill-ms", "l2-failover-link-ms")
	svc := createLB(t, c, "lb-l2", cluster.PoolL2, cluster.L2Pool)
	target := svc.LoadBalancerAddr(cluster.PortHTTP)
	anyAnswer := func(cluster.Answer) error { return nil }
	if _, err := waitAnswer(t.Context(), c.Router, target, programmed, anyAnswer); err != nil {
		t.Fatalf("from the router: %v", err)
	}
	if _, err := waitAnswer(t.Context(), c.Client, target, programmed, anyAnswer); err != nil {
		t.Fatalf("from the client: %v", err)
	}
	owner := l2Owner(t, c, svc)
	t.Logf("%s is owned by %s (%s): the router resolves it there and every request enters there", svc.LoadBalancerIP, owner.Name, owner.MAC)

	// CLUSTER_L2_KILLS failovers in a row (make bench-cluster), each from
	// the owner of the moment, restarted before the next.
	kills := envCount(t, envL2Kills, 1)
	t.Run("KillDaemon", func(t *testing.T) {
		for i := range kills {
			killed := time.Now()
			if err := owner.KillDaemon(); err != nil {
				t.Fatal(err)
			}
			// The killed daemon's node still forwards (the dataplane
			// outlives it): the address must move anyway.
			a, answered, err := cluster.FirstAnswer(t.Context(), c.Client, target, 100*time.Millisecond, moved, through(c, others(c, owner)...))
			if err != nil {
				_ = owner.StartDaemon(context.Background())
				t.Fatalf("kill %d of %d: %v", i+1, kills, err)
			}
			metric(t, "l2-failover-kill-ms", answered.Sub(killed))
			next, _ := waitNeighbour(t, c, svc.LoadBalancerIP, owner)
			t.Logf("kill %d of %d: %s moved from %s to %s; first answer through it from %s", i+1, kills, svc.LoadBalancerIP, owner.Name, next.Name, a.Pod)
			if err := owner.StartDaemon(context.Background()); err != nil {
				t.Fatal(err)
			}
			owner = settleOwner(t, c, svc, owner)
		}
	})

	owner = l2Owner(t, c, svc)
	t.Run("LinkDown", func(t *testing.T) {
		cut := time.Now()
		if err := owner.SetLAN(false); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := owner.SetLAN(true); err != nil {
				t.Error(err)
			}
		})
		a, answered, err := cluster.FirstAnswer(t.Context(), c.Client, target, 100*time.Millisecond, moved, through(c, others(c, owner)...))
		if err != nil {
			t.Fatal(err)
		}
		metric(t, "l2-failover-link-ms", answered.Sub(cut))
		next, _ := waitNeighbour(t, c, svc.LoadBalancerIP, owner)
		t.Logf("%s moved from %s to %s; first answer from %s", svc.LoadBalancerIP, owner.Name, next.Name, a.Pod)
	})
	// The cut-off node is back: let the address settle before the next
	// suite.
	settleOwner(t, c, svc, owner)
}

// waitOwnerBack waits until the address is back with owner, whose link
// was restored (the same node wins the election again once the others
// see it and its guard's window has passed), bounded by moved.
func waitOwnerBack(t *testing.T, c *cluster.Cluster, svc *cluster.Service, owner *cluster.Node) {
	t.Helper()
	if got := ownerBack(t, c, svc, owner, moved); got != owner {
		t.Fatalf("%s did not move back to %s within %s: %s holds it", svc.LoadBalancerIP, owner.Name, moved, got.Name)
	}
}

// settleOwner is ownerBack within settle, for failures in a row: with
// the shipped gossip timing on the loaded lab, a restarted daemon's
// gossip can keep flapping for minutes, cut off again and again, and
// leave the address where it is; the next failure then starts from the
// node that holds it.
func settleOwner(t *testing.T, c *cluster.Cluster, svc *cluster.Service, owner *cluster.Node) *cluster.Node {
	t.Helper()
	got := ownerBack(t, c, svc, owner, settle)
	if got != owner {
		t.Logf("%s stayed with %s: %s did not win it back within %s", svc.LoadBalancerIP, got.Name, owner.Name, settle)
	}
	return got
}

// settle bounds settleOwner: three times the guard's window with the
// lab's tolerant timing (8 s), plus detection.
const settle = 30 * time.Second

// ownerBack waits until owner holds the address (l2Owner) and returns
// it, or returns the node holding it once within has passed.
func ownerBack(t *testing.T, c *cluster.Cluster, svc *cluster.Service, owner *cluster.Node, within time.Duration) *cluster.Node {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := l2Owner(t, c, svc)
		if got == owner || time.Now().After(deadline) {
			return got
		}
		time.Sleep(time.Second)
	}
}

// stableARPOwner waits until the ARP samples of the last hold all have
// one answer, from the same node, and returns it.
func stableARPOwner(t *testing.T, c *cluster.Cluster, s *cluster.ARPSampler, hold time.Duration) *cluster.Node {
	t.Helper()
	// A starved guest (gossip suspecting members, arping's replies late)
	// can take minutes to settle: the wait bounds a failure only.
	const settle = 5 * time.Minute
	deadline := time.Now().Add(settle)
	for {
		samples := s.Samples()
		var owner *cluster.Node
		stable := len(samples) > 1 && time.Since(samples[0].At) > hold
		// The last sample is still open. A sample nobody answered (a reply
		// late on a loaded machine) says nothing of a second owner; two
		// answers or another node's do.
		for i := len(samples) - 2; stable && i >= 0 && time.Since(samples[i].At) <= hold; i-- {
			switch len(samples[i].Answers) {
			case 0:
				continue
			case 1:
			default:
				stable = false
				continue
			}
			n := c.NodeByMAC(samples[i].Answers[0])
			if owner == nil {
				owner = n
			}
			stable = n != nil && n == owner
		}
		if stable && owner != nil {
			return owner
		}
		if time.Now().After(deadline) {
			t.Fatalf("no one node answered ARP alone for %s within %s", hold, settle)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// envCount reads a positive count from the environment, def when unset.
func envCount(t *testing.T, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, s)
	}
	return n
}

// partitionHold is how long TestLoadBalancerLayer2Partition keeps the
// partition after the address moved: longer than the quorum guard's
// window with the lab's timing (8 s), so that a minority that would
// answer again does so within it.
const partitionHold = 15 * time.Second

// TestLoadBalancerLayer2Partition (issue 13's layer-2 partition safety):
// the owner of a layer-2 address is cut off from the other nodes on the
// LAN, not killed, its link to the router kept (Partition): its daemon
// runs on and the router still hears it. The majority moves the address;
// once healed, it moves back. The router, asking who has it every 50 ms
// from before the partition until after the address moved back, hears
// at most one node answer each time, and never the cut-off node once
// another answered, until the partition heals. (Before the quorum guard
// stopped a cut-off daemon from answering, it kept the address while
// the majority moved it: two nodes answered.)
func TestLoadBalancerLayer2Partition(t *testing.T) {
	c := requireGuest(t)
	claimBound(t, c, "l2-failover-partition-ms")
	svc := createLB(t, c, "lb-l2-partition", cluster.PoolL2, cluster.L2Pool)
	target := svc.LoadBalancerAddr(cluster.PortHTTP)
	if _, err := waitAnswer(t.Context(), c.Client, target, programmed, func(cluster.Answer) error { return nil }); err != nil {
		t.Fatalf("from the client: %v", err)
	}
	sampler, err := c.SampleARP(svc.LoadBalancerIP, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() []cluster.ARPSample {
		stopped = true
		samples, err := sampler.Stop()
		if err != nil {
			t.Errorf("ARP sampling: %v", err)
		}
		return samples
	}
	defer func() {
		if !stopped {
			stop()
		}
	}()
	// The owner: the one node that has answered ARP for 3 s (the
	// router's neighbour entry may lag behind), through which requests
	// enter.
	owner := stableARPOwner(t, c, sampler, 3*time.Second)
	if got := l2Owner(t, c, svc); got != owner {
		t.Fatalf("%s answers ARP for %s but requests enter through %s", owner.Name, svc.LoadBalancerIP, got.Name)
	}
	t.Logf("%s is owned by %s (%s)", svc.LoadBalancerIP, owner.Name, owner.MAC)

	cut := time.Now()
	if err := c.Partition(owner); err != nil {
		t.Fatal(err)
	}
	healed := false
	t.Cleanup(func() {
		if !healed {
			if err := c.Heal(); err != nil {
				t.Error(err)
			}
		}
	})
	// The majority moves the address: the client is answered through
	// another node.
	a, answered, err := cluster.FirstAnswer(t.Context(), c.Client, target, 100*time.Millisecond, moved, through(c, others(c, owner)...))
	if err != nil {
		t.Fatalf("after cutting %s off the other nodes: %v", owner.Name, err)
	}
	metric(t, "l2-failover-partition-ms", answered.Sub(cut))
	next, _ := waitNeighbour(t, c, svc.LoadBalancerIP, owner)
	t.Logf("%s moved from %s to %s; first answer through it from %s", svc.LoadBalancerIP, owner.Name, next.Name, a.Pod)
	time.Sleep(partitionHold)

	heal := time.Now()
	if err := c.Heal(); err != nil {
		t.Fatal(err)
	}
	healed = true
	// Healed, the node moves back to the cut-off node (the election's
	// ranking), once it has waited its guard's window: judged too.
	waitOwnerBack(t, c, svc, owner)
	t.Logf("healed: %s is owned by %s again after %s", svc.LoadBalancerIP, owner.Name, time.Since(heal).Round(time.Millisecond))
	time.Sleep(3 * time.Second)
	samples := stop()

	// Judge every question the router asked.
	var moves, silent, answeredN int
	var last *cluster.Node
	movedAt := time.Time{}
	for _, s := range samples {
		var who []string
		var nodes []*cluster.Node
		for _, mac := range s.Answers {
			n := c.NodeByMAC(mac)
			if n == nil {
				t.Errorf("%s: %s answered for %s, no node's MAC", s.At.Format("15:04:05.000"), mac, svc.LoadBalancerIP)
				continue
			}
			who = append(who, n.Name)
			nodes = append(nodes, n)
		}
		switch len(nodes) {
		case 0:
			if s.At.After(cut) {
				silent++
			}
			continue
		case 1:
		default:
			t.Errorf("%s: %d nodes answered for %s at once: %v", s.At.Format("15:04:05.000"), len(nodes), svc.LoadBalancerIP, who)
		}
		answeredN++
		n := nodes[0]
		if s.At.After(cut) && s.At.Before(heal) {
			if movedAt.IsZero() && n != owner {
				movedAt = s.At
			}
			if !movedAt.IsZero() && slices.Contains(nodes, owner) {
				t.Errorf("%s: the cut-off %s answered for %s, which %s took over at %s", s.At.Format("15:04:05.000"), owner.Name, svc.LoadBalancerIP, next.Name, movedAt.Format("15:04:05.000"))
			}
		}
		if last != nil && n != last {
			moves++
		}
		last = n
	}
	if movedAt.IsZero() {
		t.Errorf("no ARP answer from a node other than %s during the partition (%d samples)", owner.Name, len(samples))
	}
	t.Logf("%d ARP questions from the router, %d answered, %d unanswered after the cut; the answering node changed %d times", len(samples), answeredN, silent, moves)
	t.Logf("cluster-metric l2-partition-unanswered-arp=%d", silent)
}
