package cluster_test

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/reconcile"
	"github.com/switchyard-lb/switchyard/test/cluster"
)

// The soak's size, which the host side passes on: CLUSTER_SOAK_SERVICES
// ClusterIP Services, CLUSTER_SOAK_UPDATES endpoint updates spread
// evenly over CLUSTER_SOAK_DURATION. The defaults are a small soak
// (make test-cluster skips it: minutes in the guest even so); `make
// bench-cluster` runs issue 13's 1,000 Services, 10,000 updates and 30
// minutes.
const (
	envSoakServices = "CLUSTER_SOAK_SERVICES"
	envSoakUpdates  = "CLUSTER_SOAK_UPDATES"
	envSoakDuration = "CLUSTER_SOAK_DURATION"
)

// soakWriters is how many goroutines write the updates; each owns a
// share of the Services, so the updates of one Service land in order.
const soakWriters = 4

// soakGoroutineMargin is how many goroutines a daemon may have gained
// over the soak: a few for work in flight when they are counted
// (sync, scrape, watch reconnect), not one per update or Service.
const soakGoroutineMargin = 15

// TestSoak (issue 13's soak): CLUSTER_SOAK_SERVICES ClusterIP Services
// (3 ports each: 3 virtual services) with endpoints on every node's
// pods, then CLUSTER_SOAK_UPDATES EndpointSlice updates at a steady
// rate over CLUSTER_SOAK_DURATION, each a Service's endpoints replaced
// by 1 to 3 other pods, under 20 long-lived flows through every node's
// NodePort of another Service and a request every 200 ms. Each node's
// daemon and kernel are read four times: idle (before the Services),
// loaded (Services programmed), churned (the updates applied) and
// deleted (the Services gone): the daemon's RSS and goroutines
// (/metrics), IPVS virtual services and real servers, switchyard0's
// addresses, conntrack entries and the nftables table's set elements;
// the table is logged.
//
// Asserted: after the churn every kernel holds exactly what the API
// says for the Services (their endpoints' pods as real servers, none
// draining or stale), and its plan agrees; once the Services are
// deleted every kernel holds exactly what it held idle (no virtual
// service, real server, address or set element left); goroutines flat
// (loaded to churned and idle to deleted, within
// soakGoroutineMargin); no flow lost, no request failed. RSS is
// reported, not asserted (the Go heap grows and shrinks with the GC).
//
//	cluster-metric soak-updates-late=MS        (how far the updates fell behind their schedule)
//	cluster-metric soak-converged=MS           (last update to every kernel matching)
//	cluster-metric soak-goroutines-gained=N    (loaded to churned, the most of any node)
//	cluster-metric soak-rss-gained-kib=N       (loaded to churned, the most of any node)
func TestSoak(t *testing.T) {
	c := requireGuest(t)
	count := envCount(t, envSoakServices, 30)
	updates := envCount(t, envSoakUpdates, 200)
	duration := envDuration(t, envSoakDuration, 30*time.Second)
	t.Logf("soak: %d Services, %d endpoint updates over %s", count, updates, duration)
	ns := namespace(t, c)
	t.Cleanup(func() { soakEvidence(t, c) })
	flows := flowService(t, c, ns, "soak-flows")
	traffic := startChaosTraffic(t, c, flows, c.Nodes)
	waitConverged(t, c.Nodes, nil, nil)
	idle := soakSnapshot(t, c, "idle")

	pods := c.Pods()
	svcs := make([]*cluster.Service, count)
	eps := make([][]cluster.Endpoint, count)
	began := time.Now()
	parallel(t, count, func(i int) error {
		eps[i] = soakEndpoints(pods, i, 0)
		var err error
		svcs[i], err = c.CreateService(t.Context(), ns, cluster.ServiceSpec{Name: fmt.Sprintf("soak-%04d", i), Endpoints: eps[i]})
		return err
	})
	t.Logf("%d Services written in %s", count, time.Since(began).Round(time.Millisecond))
	ours := addrsOf(svcs...)
	took := waitNodes(t, c.Nodes, soakConverged(count), func(n *cluster.Node) error {
		return kernelMatchesPlan(t.Context(), n, ours, planHasEndpoints(svcs, eps))
	})
	t.Logf("every kernel programmed them %s later", took.Round(time.Millisecond))
	loaded := soakSnapshot(t, c, "loaded")

	late, last := churn(t, c, svcs, eps, updates, duration)
	metric(t, "soak-updates-late", late)
	took = waitKernelsAre(t, c.Nodes, ours, svcs, eps, planHasEndpoints(svcs, eps))
	metric(t, "soak-converged", time.Since(last))
	t.Logf("every kernel matched the API %s after the last update", took.Round(time.Millisecond))
	churned := soakSnapshot(t, c, "churned")

	parallel(t, count, func(i int) error { return c.DeleteService(t.Context(), svcs[i]) })
	waitKernelsAre(t, c.Nodes, ours, nil, nil, func(st reconcile.State) error { return planHas(st, nil, svcs) })
	deleted := soakSnapshot(t, c, "deleted")

	t.Logf("soak, per node (RSS MiB, goroutines, IPVS virtual services, real servers, switchyard0 addresses, conntrack entries, nftables set elements):\n%s",
		soakTable(idle, loaded, churned, deleted))

	var gained, rssGained int
	for i, n := range c.Nodes {
		g := churned[i].goroutines - loaded[i].goroutines
		gained, rssGained = max(gained, g), max(rssGained, (churned[i].rss-loaded[i].rss)/1024)
		if g > soakGoroutineMargin {
			t.Errorf("%s's daemon gained %d goroutines over %d updates (%d to %d), want at most %d", n.Name, g, updates,
				loaded[i].goroutines, churned[i].goroutines, soakGoroutineMargin)
		}
		if g := deleted[i].goroutines - idle[i].goroutines; g > soakGoroutineMargin {
			t.Errorf("%s's daemon has %d goroutines more once the Services are gone than before them (%d to %d), want at most %d",
				n.Name, g, idle[i].goroutines, deleted[i].goroutines, soakGoroutineMargin)
		}
		if d := cmp.Diff(idle[i].objects(), deleted[i].objects()); d != "" {
			t.Errorf("%s's kernel once the Services are gone differs from before them (-idle +deleted):\n%s", n.Name, d)
		}
	}
	t.Logf("cluster-metric soak-goroutines-gained=%d", gained)
	t.Logf("cluster-metric soak-rss-gained-kib=%d", rssGained)
	traffic.end(t, "soak", "during the soak")
}

// soakEndpoints are the endpoints of Service i after its update u (0:
// created): 1 to 3 pods, moving through every node's.
func soakEndpoints(pods []*cluster.Pod, i, u int) []cluster.Endpoint {
	n := 1 + (i+u)%min(3, len(pods))
	var out []cluster.Endpoint
	for j := range n {
		out = append(out, cluster.Endpoint{Pod: pods[(i*5+u*7+j)%len(pods)]})
	}
	return out
}

// churn writes updates endpoint updates, evenly spaced over duration,
// the Services in turn, and records the endpoints written last in eps.
// It returns how far the writes fell behind their schedule (the API
// server and the guest's one CPU set the pace) and when the last one
// was written.
func churn(t *testing.T, c *cluster.Cluster, svcs []*cluster.Service, eps [][]cluster.Endpoint, updates int, duration time.Duration) (late time.Duration, last time.Time) {
	t.Helper()
	pods := c.Pods()
	every := duration / time.Duration(updates)
	queues := make([]chan int, soakWriters)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for w := range queues {
		queues[w] = make(chan int, 64)
		wg.Go(func() {
			for u := range queues[w] {
				i := u % len(svcs)
				e := soakEndpoints(pods, i, u/len(svcs)+1)
				err := c.WriteEndpoints(t.Context(), svcs[i], e)
				mu.Lock()
				if err == nil {
					eps[i] = e
				} else if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		})
	}
	began := time.Now()
	for u := range updates {
		due := began.Add(time.Duration(u) * every)
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		queues[(u%len(svcs))%soakWriters] <- u
		late = max(late, time.Since(due))
	}
	for _, q := range queues {
		close(q)
	}
	wg.Wait()
	last = time.Now()
	t.Logf("%d endpoint updates written in %s (scheduled over %s, at most %s behind)", updates,
		last.Sub(began).Round(time.Millisecond), duration, late.Round(time.Millisecond))
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	return late, last
}

// planHasEndpoints checks that a daemon's plan has each Service with as
// many destinations per virtual service as its endpoints (planHas).
func planHasEndpoints(svcs []*cluster.Service, eps [][]cluster.Endpoint) func(reconcile.State) error {
	want := map[*cluster.Service]int{}
	for i, s := range svcs {
		want[s] = len(eps[i])
	}
	return func(st reconcile.State) error { return planHas(st, want, nil) }
}

// waitKernelsAre waits until every node's kernel, on the addresses in
// only, holds exactly what the API says of svcs with their endpoints
// eps (nothing when svcs is empty): no real server draining or left
// over. Its plan must pass check and its kernel match it as well
// (kernelMatchesPlan). It returns how long that took.
func waitKernelsAre(t *testing.T, nodes []*cluster.Node, only map[netip.Addr]bool, svcs []*cluster.Service, eps [][]cluster.Endpoint, check func(reconcile.State) error) time.Duration {
	t.Helper()
	want := cluster.KernelState{Services: map[string][]string{}}
	for i, s := range svcs {
		want = want.Merge(s.ServiceKernel(eps[i]))
	}
	exactly := func(n *cluster.Node) error {
		if err := kernelMatchesPlan(t.Context(), n, only, check); err != nil {
			return err
		}
		k, err := n.Kernel()
		if err != nil {
			return err
		}
		got, err := k.Only(only).WithoutWeights()
		if err != nil {
			return fmt.Errorf("%s: %w", n.Name, err)
		}
		if d := cmp.Diff(want, got, addrs); d != "" {
			return fmt.Errorf("%s's kernel differs from the API (-API +kernel):\n%s", n.Name, d)
		}
		return nil
	}
	return waitNodes(t, nodes, soakConverged(len(only)), exactly)
}

// soakConverged bounds how long the daemons may take to program count
// Services: converged, and a minute more per 100 Services (a sync of a
// thousand Services takes the emulated CPU tens of seconds; waits bound
// failures only).
func soakConverged(count int) time.Duration {
	return converged + time.Duration(count/100)*time.Minute
}

// soakSample is what the soak reads of one node at one stage.
type soakSample struct {
	node, stage                         string
	rss, goroutines                     int
	services, servers, addrs, conntrack int
	sets                                map[string]int
}

// objects are the kernel objects of s that must come back to what they
// were once the soak's Services are gone (conntrack entries follow the
// traffic, so they are left out).
func (s soakSample) objects() map[string]int {
	out := map[string]int{"ipvs-services": s.services, "real-servers": s.servers, "switchyard0-addrs": s.addrs}
	for name, n := range s.sets {
		out["set "+name] = n
	}
	return out
}

// soakSnapshot reads every node at stage. Goroutines are the fewest of
// three readings half a second apart, leaving out work in flight; real
// servers are those at a weight above 0 (draining ones of earlier
// suites go when their connections end).
func soakSnapshot(t *testing.T, c *cluster.Cluster, stage string) []soakSample {
	t.Helper()
	var out []soakSample
	for _, n := range c.Nodes {
		s := soakSample{node: n.Name, stage: stage, goroutines: -1}
		for i := range 3 {
			if i > 0 {
				time.Sleep(500 * time.Millisecond)
			}
			m, err := soakMetrics(t, n)
			if err != nil {
				t.Fatal(err)
			}
			if g := int(m["go_goroutines"]); s.goroutines < 0 || g < s.goroutines {
				s.goroutines = g
			}
			s.rss = int(m["process_resident_memory_bytes"])
		}
		k, err := n.Kernel()
		if err != nil {
			t.Fatal(err)
		}
		s.services, _, s.addrs, _ = k.Count()
		for _, ds := range k.Services {
			for _, d := range ds {
				if !strings.HasSuffix(d, " w0") {
					s.servers++
				}
			}
		}
		if s.conntrack, err = n.Conntrack(); err != nil {
			t.Fatal(err)
		}
		if s.sets, err = n.NFTSetSizes(); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	// Each stage as it is read: a soak that fails later keeps it.
	t.Logf("soak %s:\n%s", stage, soakTable(out))
	return out
}

// soakTable formats the samples, one row per node and stage.
func soakTable(stages ...[]soakSample) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-6s %-8s %7s %10s %13s %12s %6s %9s %12s\n", "node", "stage", "RSS MiB", "goroutines", "IPVS services", "real servers", "addrs", "conntrack", "set elements")
	for i := range stages[0] {
		for _, st := range stages {
			s := st[i]
			elems := 0
			for _, n := range s.sets {
				elems += n
			}
			fmt.Fprintf(&b, "%-6s %-8s %7.1f %10d %13d %12d %6d %9d %12d\n", s.node, s.stage, float64(s.rss)/(1<<20),
				s.goroutines, s.services, s.servers, s.addrs, s.conntrack, elems)
		}
	}
	// Which sets the elements are in, on the first node.
	for _, st := range stages {
		if len(st) == 0 {
			continue
		}
		fmt.Fprintf(&b, "%s %s:", st[0].node, st[0].stage)
		for _, name := range slices.Sorted(maps.Keys(st[0].sets)) {
			fmt.Fprintf(&b, " %s %d", name, st[0].sets[name])
		}
		b.WriteString("\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// soakEvidence logs, when the soak failed, what tells its causes apart:
// each node's real servers at weight 0 with their connections, and its
// daemon's warnings and errors other than gossip's (which drown them in
// the log's tail).
func soakEvidence(t *testing.T, c *cluster.Cluster) {
	if !t.Failed() {
		return
	}
	for _, n := range c.Nodes {
		servers, err := n.DrainingServers()
		if err != nil {
			t.Logf("%s: %v", n.Name, err)
		}
		t.Logf("%s: %d real servers at weight 0:\n%s", n.Name, len(servers), strings.Join(servers[:min(40, len(servers))], "\n"))
		lines := n.DaemonLogLines(func(l string) bool {
			return (strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR")) && !strings.Contains(l, "component=membership")
		})
		t.Logf("%s's daemon warnings and errors but gossip's (%d, the last 40):\n%s", n.Name, len(lines), strings.Join(lines[max(0, len(lines)-40):], "\n"))
		if g, err := n.DaemonGoroutines(context.Background()); err != nil {
			t.Logf("%s: %v", n.Name, err)
		} else {
			t.Logf("%s's daemon's goroutines in the dataplane or the sync:\n%s", n.Name, syncStacks(g))
		}
	}
}

// syncStacks keeps, of pprof's aggregated goroutine dump, the stacks that
// pass through the IPVS dataplane or the reconcile loop.
func syncStacks(dump string) string {
	var out []string
	for _, stack := range strings.Split(dump, "\n\n") {
		if strings.Contains(stack, "switchyard/ipvs.") || strings.Contains(stack, "switchyard/core/reconcile.") {
			out = append(out, stack)
		}
	}
	return strings.Join(out, "\n\n")
}

// soakMetrics reads the daemon's goroutines and RSS, again when a reading
// times out, for up to soakMetricsTries readings: under a host load of
// 40 a starved guest let one /metrics request time out (a reading, not a
// failure of the daemon).
func soakMetrics(t *testing.T, n *cluster.Node) (map[string]float64, error) {
	var err error
	for range soakMetricsTries {
		ctx, cancel := context.WithTimeout(t.Context(), stallTimeout)
		var m map[string]float64
		m, err = n.DaemonMetrics(ctx, "go_goroutines", "process_resident_memory_bytes")
		cancel()
		if err == nil || t.Context().Err() != nil {
			return m, err
		}
	}
	return nil, err
}

// soakMetricsTries bounds soakMetrics.
const soakMetricsTries = 5
