package cluster_test

// The chaos suites (issue 13, point 4). The file's name puts them last:
// they cut the API server, kill a daemon and restart the router, which
// the suites before them do not expect.

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"

	"github.com/switchyard-lb/switchyard/core/reconcile"
	"github.com/switchyard-lb/switchyard/test/cluster"
)

// The chaos suites' settings, which the host side passes on:
// CLUSTER_API_OUTAGE is how long TestChaosAPIServerOutage keeps the API
// server away (default 20s; `make bench-cluster` runs 60s);
// CLUSTER_CHAOS_SERVICES is how many Services appear at once in
// TestChaosDaemonKilledMidSync (default 50; `make bench-cluster` runs
// 200: on the loaded lab machine writing 200 took 6 minutes).
const (
	envAPIOutage     = "CLUSTER_API_OUTAGE"
	envChaosServices = "CLUSTER_CHAOS_SERVICES"
)

// converged bounds how long a daemon may take to program what changed
// once it can (waits bound failures only).
const converged = 3 * time.Minute

// chaosTraffic is the traffic every chaos suite keeps running: 20
// long-lived TCP flows from the client to each given node's NodePort
// of svc, and a request every 200 ms cycling through them.
type chaosTraffic struct {
	flows []*cluster.Traffic
	reqs  *requests
}

func startChaosTraffic(t *testing.T, c *cluster.Cluster, svc *cluster.Service, nodes []*cluster.Node) *chaosTraffic {
	t.Helper()
	ct := &chaosTraffic{}
	var targets []target
	for _, n := range nodes {
		if _, err := waitAnswer(t.Context(), c.Client, svc.NodeAddr(n, cluster.PortHTTP), programmed, func(cluster.Answer) error { return nil }); err != nil {
			t.Fatalf("through %s before the chaos: %v", n.Name, err)
		}
		tr, err := cluster.StartTraffic(t.Context(), c.Client, cluster.TrafficSpec{
			Network: "tcp", Target: svc.NodeAddr(n, cluster.PortTCP), Flows: 20, Interval: time.Second, Timeout: stallTimeout,
		})
		if err != nil {
			t.Fatal(err)
		}
		ct.flows = append(ct.flows, tr)
		targets = append(targets, target{c.Client, svc.NodeAddr(n, cluster.PortHTTP)})
	}
	ct.reqs = startRequests(t.Context(), 200*time.Millisecond, targets)
	return ct
}

// stop ends the traffic, logs and returns the flows lost of those
// established and the requests failed of those sent.
func (ct *chaosTraffic) stop(t *testing.T) (lost, established, failed, sent int) {
	t.Helper()
	sent, failures := ct.reqs.stop()
	for _, tr := range ct.flows {
		r := tr.Stop()
		t.Logf("flows: %s", r)
		established += r.Established()
		lost += r.Established() - r.Survived()
	}
	if len(failures) > 0 {
		t.Logf("first failed requests: %v", failures[:min(5, len(failures))])
	}
	return lost, established, len(failures), sent
}

// end stops the traffic, logs its flows lost and requests failed as
// NAME-flows-lost and NAME-requests-failed, and fails t unless both are
// none; during says when ("around the kill").
func (ct *chaosTraffic) end(t *testing.T, name, during string) {
	t.Helper()
	lost, established, failed, sent := ct.stop(t)
	t.Logf("cluster-metric %s-flows-lost=%d established=%d", name, lost, established)
	t.Logf("cluster-metric %s-requests-failed=%d requests=%d", name, failed, sent)
	if lost != 0 {
		t.Errorf("%d of %d established flows broke %s, want none", lost, established, during)
	}
	if failed != 0 {
		t.Errorf("%d of %d requests failed %s, want none", failed, sent, during)
	}
}

// flowService creates a NodePort Service whose endpoints are the pods
// of every node but the first (see TestRollingRestart for why).
func flowService(t *testing.T, c *cluster.Cluster, ns, name string) *cluster.Service {
	t.Helper()
	var eps []cluster.Endpoint
	for _, p := range c.Pods() {
		if p.Node != c.Nodes[0] {
			eps = append(eps, cluster.Endpoint{Pod: p})
		}
	}
	svc, err := c.CreateService(t.Context(), ns, cluster.ServiceSpec{Name: name, Type: corev1.ServiceTypeNodePort, Endpoints: eps})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// endpoints are the pods as ready endpoints.
func endpoints(pods ...*cluster.Pod) []cluster.Endpoint {
	var out []cluster.Endpoint
	for _, p := range pods {
		out = append(out, cluster.Endpoint{Pod: p})
	}
	return out
}

// planHas checks that a daemon's plan has each of want's Services
// programmed on its ClusterIP (one virtual service per port, as many
// destinations as endpoints) and none of gone's.
func planHas(st reconcile.State, want map[*cluster.Service]int, gone []*cluster.Service) error {
	dests := map[netip.Addr][]int{}
	for _, s := range st.Desired {
		for _, vs := range s.VirtualServices {
			if vs.Kind == "ClusterIP" {
				dests[vs.Address.Addr()] = append(dests[vs.Address.Addr()], len(vs.Destinations))
			}
		}
	}
	for svc, n := range want {
		got := dests[svc.ClusterIP]
		if len(got) != len(svc.Ports) {
			return fmt.Errorf("%s/%s: %d virtual services on its ClusterIP %s, want %d", svc.Namespace, svc.Name, len(got), svc.ClusterIP, len(svc.Ports))
		}
		for _, d := range got {
			if d != n {
				return fmt.Errorf("%s/%s: virtual services with %v destinations, want %d each", svc.Namespace, svc.Name, got, n)
			}
		}
	}
	for _, svc := range gone {
		if len(dests[svc.ClusterIP]) > 0 {
			return fmt.Errorf("%s/%s: deleted, still planned on %s", svc.Namespace, svc.Name, svc.ClusterIP)
		}
	}
	return nil
}

// kernelMatchesPlan reads n's plan and kernel and returns nil when the
// kernel holds exactly what the plan wants, restricted to only when it
// is not nil, the plan passing check first. Destinations the kernel
// holds at weight 0 that the plan no longer wants are draining (graceful
// termination), not leaked, and are left out.
func kernelMatchesPlan(ctx context.Context, n *cluster.Node, only map[netip.Addr]bool, check func(reconcile.State) error) error {
	st, err := n.Plan(ctx)
	if err != nil {
		return err
	}
	if check != nil {
		if err := check(st); err != nil {
			return fmt.Errorf("%s's plan: %w", n.Name, err)
		}
	}
	want := cluster.PlannedKernel(st)
	got, err := n.Kernel()
	if err != nil {
		return err
	}
	got = withoutDraining(got, want)
	if only != nil {
		want, got = want.Only(only), got.Only(only)
	}
	if d := cmp.Diff(want, got, addrs); d != "" {
		return fmt.Errorf("%s's kernel differs from its plan (-plan +kernel):\n%s", n.Name, d)
	}
	return nil
}

// addrs compares netip.Addr values.
var addrs = cmpopts.EquateComparable(netip.Addr{})

// withoutDraining drops from got the weight-0 destinations that want
// does not have.
func withoutDraining(got, want cluster.KernelState) cluster.KernelState {
	out := got
	out.Services = map[string][]string{}
	for k, ds := range got.Services {
		wanted := map[string]bool{}
		for _, d := range want.Services[k] {
			wanted[d] = true
		}
		kept := []string{}
		for _, d := range ds {
			if wanted[d] || !strings.HasSuffix(d, " w0") {
				kept = append(kept, d)
			}
		}
		out.Services[k] = kept
	}
	return out
}

// waitConverged waits until every node's kernel matches its plan (as
// kernelMatchesPlan) and returns how long that took.
func waitConverged(t *testing.T, nodes []*cluster.Node, only map[netip.Addr]bool, check func(reconcile.State) error) time.Duration {
	t.Helper()
	return waitNodes(t, nodes, converged, func(n *cluster.Node) error { return kernelMatchesPlan(t.Context(), n, only, check) })
}

// waitNodes waits until ok accepts every node, one after the other, for
// at most bound in all, and returns how long that took. It polls no more
// often than every 250 ms, and not more often than an attempt takes:
// reading a kernel with thousands of virtual services takes the guest's
// one CPU for seconds, which the daemons need too.
func waitNodes(t *testing.T, nodes []*cluster.Node, bound time.Duration, ok func(*cluster.Node) error) time.Duration {
	t.Helper()
	began := time.Now()
	deadline := began.Add(bound)
	for _, n := range nodes {
		for {
			tried := time.Now()
			err := ok(n)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("not converged after %s: %v", bound, err)
			}
			time.Sleep(max(250*time.Millisecond, time.Since(tried)))
		}
	}
	return time.Since(began)
}

// addrsOf are the Services' ClusterIPs, as a set.
func addrsOf(svcs ...*cluster.Service) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for _, s := range svcs {
		out[s.ClusterIP] = true
	}
	return out
}

// healthWatch polls every node's /livez and /readyz, one after the
// other, every 500 ms until stopped, and records /livez failures, when
// each node was first unready for its API watch (apiUnready) and when it
// was ready again after that. Each request
// may take stallTimeout: on the loaded lab machine an answer can take
// seconds, which is not a failure.
type healthWatch struct {
	stop chan struct{}
	wg   sync.WaitGroup

	mu         sync.Mutex
	liveFailed []string
	unready    map[string]time.Time // first non-200 /readyz
	readyAgain map[string]time.Time // first 200 after being unready
	unreadyMsg map[string]string
}

// apiUnready is in the daemon's /readyz answer while its API watch fails
// (other reasons, such as a BGP session down, are not the outage).
const apiUnready = "watching Kubernetes"

func watchHealth(ctx context.Context, nodes []*cluster.Node) *healthWatch {
	h := &healthWatch{stop: make(chan struct{}),
		unready: map[string]time.Time{}, readyAgain: map[string]time.Time{}, unreadyMsg: map[string]string{}}
	get := func(n *cluster.Node, path string) (int, string, error) {
		ctx, cancel := context.WithTimeout(ctx, stallTimeout)
		defer cancel()
		return n.Health(ctx, path)
	}
	for _, n := range nodes {
		h.wg.Go(func() {
			for {
				code, body, err := get(n, "/livez")
				now := time.Now()
				h.mu.Lock()
				if err != nil || code != 200 {
					h.liveFailed = append(h.liveFailed, fmt.Sprintf("%s %s: %d %v %s", now.Format("15:04:05.000"), n.Name, code, err, body))
				}
				h.mu.Unlock()
				code, body, err = get(n, "/readyz")
				now = time.Now()
				h.mu.Lock()
				_, was := h.unready[n.Name]
				_, back := h.readyAgain[n.Name]
				switch {
				case err == nil && code == 200 && was && !back:
					h.readyAgain[n.Name] = now
				case err == nil && code != 200 && !was && strings.Contains(body, apiUnready):
					h.unready[n.Name], h.unreadyMsg[n.Name] = now, body
				}
				h.mu.Unlock()
				select {
				case <-h.stop:
					return
				case <-ctx.Done():
					return
				case <-time.After(500 * time.Millisecond):
				}
			}
		})
	}
	return h
}

// back reports how many nodes were unready and are ready again.
func (h *healthWatch) back() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.readyAgain)
}

func (h *healthWatch) end() {
	close(h.stop)
	h.wg.Wait()
}

// TestChaosAPIServerOutage: the API server goes away from every daemon
// for CLUSTER_API_OUTAGE (20 s in make test-cluster, 60 s in make
// bench-cluster) and comes back, under long-lived flows through every
// node's NodePort and a request every 200 ms. The outage is the daemons'
// forwards of the API server closing (Cluster.APIDown): their watches
// end and new connections are refused, as when kube-apiserver stops;
// the API server itself stays up for the harness, which changes objects
// meanwhile as the rest of a control plane would. A Service created
// just before the outage, one created, one deleted and one whose
// endpoints changed during it, and one created right after it must all
// be in every node's kernel (exactly as each daemon's plan says) once
// the API server is back. Meanwhile no established flow may break, no
// request fail, every /livez answer 200, and every daemon must report
// the outage on /readyz and be ready again after it. Reported:
//
//	cluster-metric api-outage-flows-lost=N
//	cluster-metric api-outage-requests-failed=N
//	cluster-metric api-outage-unready=MS      (outage start to /readyz failing, slowest node)
//	cluster-metric api-outage-ready=MS        (API back to /readyz 200, slowest node)
//	cluster-metric api-outage-converged=MS    (API back to every kernel matching)
func TestChaosAPIServerOutage(t *testing.T) {
	c := requireGuest(t)
	outage := envDuration(t, envAPIOutage, 20*time.Second)
	ns := namespace(t, c)
	flows := flowService(t, c, ns, "outage-flows")
	pods := c.Pods()
	gone, err := c.CreateService(t.Context(), ns, cluster.ServiceSpec{Name: "outage-gone", Endpoints: endpoints(pods[0])})
	if err != nil {
		t.Fatal(err)
	}
	edited, err := c.CreateService(t.Context(), ns, cluster.ServiceSpec{Name: "outage-edited", Endpoints: endpoints(pods[0])})
	if err != nil {
		t.Fatal(err)
	}
	waitConverged(t, c.Nodes, addrsOf(gone, edited), func(st reconcile.State) error {
		return planHas(st, map[*cluster.Service]int{gone: 1, edited: 1}, nil)
	})
	traffic := startChaosTraffic(t, c, flows, c.Nodes)
	health := watchHealth(t.Context(), c.Nodes)

	before, err := c.CreateService(t.Context(), ns, cluster.ServiceSpec{Name: "outage-before", Endpoints: endpoints(pods[1])})
	if err != nil {
		t.Fatal(err)
	}
	down := time.Now()
	if err := c.APIDown(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.APIUp(); err != nil {
			t.Error(err)
		}
	})
	time.Sleep(outage / 4)
	during, err := c.CreateService(t.Context(), ns, cluster.ServiceSpec{Name: "outage-during", Endpoints: endpoints(pods[1], pods[2])})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteService(t.Context(), gone); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteEndpoints(t.Context(), edited, endpoints(pods[0], pods[1], pods[2])); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(down.Add(outage)))
	if err := c.APIUp(); err != nil {
		t.Fatal(err)
	}
	up := time.Now()
	t.Logf("the API server was away from the daemons for %s", up.Sub(down).Round(time.Millisecond))
	after, err := c.CreateService(t.Context(), ns, cluster.ServiceSpec{Name: "outage-after", Endpoints: endpoints(pods[2])})
	if err != nil {
		t.Fatal(err)
	}
	took := waitConverged(t, c.Nodes, addrsOf(before, during, after, edited, gone), func(st reconcile.State) error {
		return planHas(st, map[*cluster.Service]int{before: 1, during: 2, edited: 3, after: 1}, []*cluster.Service{gone})
	})
	metric(t, "api-outage-converged", took)
	// Every daemon ready again, then a little more traffic.
	deadline := time.Now().Add(converged)
	for {
		if health.back() == len(c.Nodes) || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	health.end()
	lost, established, failed, sent := traffic.stop(t)

	var slowUnready, slowReady time.Duration
	for _, n := range c.Nodes {
		at, ok := health.unready[n.Name]
		if !ok {
			t.Errorf("%s's daemon never reported the outage: /readyz answered 200 throughout", n.Name)
			continue
		}
		t.Logf("%s's /readyz failed %s after the outage began: %s", n.Name, at.Sub(down).Round(time.Millisecond), health.unreadyMsg[n.Name])
		slowUnready = max(slowUnready, at.Sub(down))
		again, ok := health.readyAgain[n.Name]
		if !ok {
			t.Errorf("%s's daemon not ready %s after the API server came back", n.Name, converged)
			continue
		}
		slowReady = max(slowReady, again.Sub(up))
	}
	metric(t, "api-outage-unready", slowUnready)
	metric(t, "api-outage-ready", slowReady)
	t.Logf("cluster-metric api-outage-flows-lost=%d established=%d", lost, established)
	t.Logf("cluster-metric api-outage-requests-failed=%d requests=%d", failed, sent)
	if len(health.liveFailed) > 0 {
		t.Errorf("/livez failed %d times during the outage, want never; first: %v", len(health.liveFailed), health.liveFailed[:min(5, len(health.liveFailed))])
	}
	if lost != 0 {
		t.Errorf("the API server outage broke %d of %d established flows, want none", lost, established)
	}
	if failed != 0 {
		t.Errorf("%d of %d requests failed during the API server outage, want none", failed, sent)
	}
}

// envDuration reads a duration setting, def when unset.
func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	s, ok := os.LookupEnv(name)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration", name, s)
	}
	return d
}

// TestChaosDaemonKilledMidSync: node3's daemon is SIGKILLed while it
// programs a large change (CLUSTER_CHAOS_SERVICES Services appearing at
// once, 3 virtual services each: 50 by default, 200 in make
// bench-cluster) and started again, under
// long-lived flows through its NodePort. To make the change arrive at
// once, the daemon is frozen (SIGSTOP) while the Services are written
// and thawed; it is killed as soon as its kernel holds some of their
// virtual services but not all (the suite fails if the kill misses the
// sync). After its restart its kernel must match its plan exactly:
// virtual services and real servers, switchyard0's addresses and the
// ClusterIP sets; after the Services are deleted, it must hold again
// exactly what it held before (services, real servers, addresses, set
// elements). No established flow may break, no request fail.
// Reported:
//
//	cluster-metric kill-mid-sync-programmed-at-kill=N   (virtual services, of 3 per Service)
//	cluster-metric kill-mid-sync-converged=MS           (restart to kernel matching the plan)
//	cluster-metric kill-mid-sync-flows-lost=N
//	cluster-metric kill-mid-sync-requests-failed=N
func TestChaosDaemonKilledMidSync(t *testing.T) {
	c := requireGuest(t)
	count := envCount(t, envChaosServices, 50)
	victim := c.Nodes[len(c.Nodes)-1]
	ns := namespace(t, c)
	flows := flowService(t, c, ns, "kill-flows")
	// The traffic first: it waits for an answer through the victim, so
	// its plan has the flows' endpoints when the baseline is read.
	traffic := startChaosTraffic(t, c, flows, []*cluster.Node{victim})
	waitConverged(t, []*cluster.Node{victim}, nil, nil)
	baseline, err := victim.Kernel()
	if err != nil {
		t.Fatal(err)
	}

	if err := victim.SignalDaemon(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thawed := false
	t.Cleanup(func() {
		if !thawed {
			_ = victim.SignalDaemon(syscall.SIGCONT)
		}
	})
	began := time.Now()
	pods := c.Pods()
	svcs := make([]*cluster.Service, count)
	parallel(t, count, func(i int) error {
		var err error
		svcs[i], err = c.CreateService(t.Context(), ns, cluster.ServiceSpec{
			Name: fmt.Sprintf("many-%03d", i), Endpoints: endpoints(pods[i%len(pods)], pods[(i+1)%len(pods)]),
		})
		return err
	})
	t.Logf("%d Services written in %s while %s's daemon was frozen", count, time.Since(began).Round(time.Millisecond), victim.Name)
	ours := addrsOf(svcs...)
	want := count * len(svcs[0].Ports)
	if err := victim.SignalDaemon(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	thawed = true
	thaw := time.Now()
	var atKill int
	for {
		n, err := victim.VirtualServicesOn(ours)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			if err := victim.KillDaemon(); err != nil {
				t.Fatal(err)
			}
			atKill = n
			break
		}
		if time.Since(thaw) > converged {
			t.Fatalf("%s's daemon programmed none of the %d Services in %s", victim.Name, count, converged)
		}
		// Not a busy loop: the guest has one CPU, which the daemon
		// needs to program anything.
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("%s's daemon SIGKILLed %s after it was thawed, with %d of %d virtual services programmed",
		victim.Name, time.Since(thaw).Round(time.Millisecond), atKill, want)
	t.Logf("cluster-metric kill-mid-sync-programmed-at-kill=%d", atKill)
	if atKill >= want {
		t.Errorf("the kill missed the sync: all %d virtual services were programmed", want)
	}
	restarted := time.Now()
	if err := victim.StartDaemon(t.Context()); err != nil {
		t.Fatal(err)
	}
	plan := func(st reconcile.State) error {
		m := map[*cluster.Service]int{}
		for _, s := range svcs {
			m[s] = 2
		}
		return planHas(st, m, nil)
	}
	waitConverged(t, []*cluster.Node{victim}, nil, plan)
	metric(t, "kill-mid-sync-converged", time.Since(restarted))

	parallel(t, count, func(i int) error { return c.DeleteService(t.Context(), svcs[i]) })
	waitConverged(t, []*cluster.Node{victim}, nil, func(st reconcile.State) error { return planHas(st, nil, svcs) })
	after, err := victim.Kernel()
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(baseline.Only(ours), after.Only(ours), addrs); d != "" {
		t.Errorf("%s's kernel after the Services were deleted (-before +after):\n%s", victim.Name, d)
	}
	bs, bd, ba, bc := baseline.Count()
	as, ad, aa, ac := after.Count()
	t.Logf("%s's kernel before the Services and after their deletion: %d/%d virtual services, %d/%d real servers, %d/%d switchyard0 addresses, %d/%d ClusterIP set elements",
		victim.Name, bs, as, bd, ad, ba, aa, bc, ac)
	if bs != as || bd != ad || ba != aa || bc != ac {
		t.Errorf("%s's kernel holds other objects than before the Services (-before +after):\n%s", victim.Name, cmp.Diff(baseline, after, addrs))
	}
	traffic.end(t, "kill-mid-sync", "around the kill")
}

// parallel runs fn(0..n-1) on 8 goroutines and fails t with the first
// error.
func parallel(t *testing.T, n int, fn func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, n)
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				errs[i] = fn(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestChaosRouterRestart: the router's FRR restarts (bgpd and zebra
// stopped, their routes gone from its kernel, and started again) under
// 100 long-lived TCP flows through its ECMP route to a LoadBalancer IP
// of the BGP pool and a request every 100 ms. The route must come back
// over every node (the daemons reconnect and announce again); the time
// to recovery, the flows lost and the requests failed are reported, not
// asserted (while the router has no route, packets to the address are
// dropped or answered unreachable: what a client sees depends on its
// timeouts):
//
//	cluster-metric router-restart-recovered=MS   (restart begun to every next hop back)
//	cluster-metric router-restart-flows-lost=N
//	cluster-metric router-restart-requests-failed=N
func TestChaosRouterRestart(t *testing.T) {
	c := requireGuest(t)
	svc := createLB(t, c, "lb-router-restart", cluster.PoolBGP, cluster.BGPPool)
	waitNextHops(t, c, svc.LoadBalancerIP, c.Nodes, 3*time.Second)
	if _, err := waitAnswer(t.Context(), c.Client, svc.LoadBalancerAddr(cluster.PortHTTP), programmed, through(c, c.Nodes...)); err != nil {
		t.Fatalf("from the client: %v", err)
	}
	tr, err := cluster.StartTraffic(t.Context(), c.Client, cluster.TrafficSpec{
		Network: "tcp", Target: svc.LoadBalancerAddr(cluster.PortTCP), Flows: 100, Interval: time.Second, Timeout: stallTimeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	reqs := startRequests(t.Context(), 100*time.Millisecond, []target{{c.Client, svc.LoadBalancerAddr(cluster.PortHTTP)}})
	time.Sleep(2 * time.Second)

	began := time.Now()
	if err := c.FRR.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Logf("FRR restarted, its vty answering in %s", time.Since(began).Round(time.Millisecond))
	back := waitNextHops(t, c, svc.LoadBalancerIP, c.Nodes, 0)
	metric(t, "router-restart-recovered", back.Sub(began))
	time.Sleep(5 * time.Second)
	sent, failures := reqs.stop()
	r := tr.Stop()
	t.Logf("flows: %s", r)
	lost := r.Established() - r.Survived()
	t.Logf("cluster-metric router-restart-flows-lost=%d established=%d", lost, r.Established())
	t.Logf("cluster-metric router-restart-requests-failed=%d requests=%d", len(failures), sent)
	if len(failures) > 0 {
		t.Logf("first failed requests: %v", failures[:min(5, len(failures))])
	}
}
