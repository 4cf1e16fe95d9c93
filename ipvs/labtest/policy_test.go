//go:build linux

package labtest

import (
	"context"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plan"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/core/plugin/plugintest"
	"github.com/switchyard-lb/switchyard/core/policystage"
	"github.com/switchyard-lb/switchyard/core/reconcile"
	"github.com/switchyard-lb/switchyard/core/runner/runnertest"
	"github.com/switchyard-lb/switchyard/ipvs"
)

// labPolicy is an in-process balancing policy keyed by backend: first
// static weights 1/2/3 on be1/be2/be3, then, once leastConns is set,
// least-connections from the live statistics (one more than the busiest
// backend's active connections, less its own). It keeps the active
// connections it last saw, by backend name.
type labPolicy struct {
	mu         sync.Mutex
	leastConns bool
	seen       map[string]uint32
}

func (p *labPolicy) evaluate(_ context.Context, in *plugin.PolicyInput) (plugin.PolicyResult, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen = map[string]uint32{}
	var most uint32
	for _, ep := range in.Endpoints {
		p.seen[backendName(ep.Addr)] = ep.Stats.ActiveConns
		most = max(most, ep.Stats.ActiveConns)
	}
	w := make([]uint32, len(in.Endpoints))
	for i, ep := range in.Endpoints {
		if p.leastConns {
			w[i] = most + 1 - ep.Stats.ActiveConns
			continue
		}
		for j, be := range topo.Backends {
			if be.IPv4 == ep.Addr {
				w[i] = uint32(j + 1)
			}
		}
	}
	return plugin.PolicyResult{Weights: w}, nil
}

func (p *labPolicy) setLeastConns() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.leastConns = true
}

func (p *labPolicy) lastSeen() map[string]uint32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen
}

func backendName(a netip.Addr) string {
	for _, be := range topo.Backends {
		if be.IPv4 == a || be.IPv6 == a {
			return be.Name
		}
	}
	return "unknown " + a.String()
}

// backendEndpoints returns one ready endpoint of port "http" per lab
// backend, each on a node of its own.
// policyLoop is the policy tests' reconcile loop (fake Source and
// clock, real planner, policy stage and lab Dataplane) on node "lab".
type policyLoop struct {
	src   *plugintest.Source
	dp    *labDataplane
	clock *runnertest.Clock
	loop  *reconcile.Loop
}

// newPolicyLoop starts the loop with the policies, reporting to
// reporter (nil: none), a statistics tick, and the Services, synced.
func newPolicyLoop(t *testing.T, pols *plugintest.Policies, reporter *plugintest.Reporter, tick time.Duration, services ...model.ServiceState) *policyLoop {
	t.Helper()
	l := &policyLoop{src: plugintest.NewSource(), dp: newLabDataplane(t), clock: runnertest.NewClock(time.Now())}
	delta := model.Delta{
		Nodes:    map[string]*model.Node{"lab": {Name: "lab", Ready: true}},
		Services: map[model.ServiceKey]model.ServiceState{},
	}
	for _, s := range services {
		delta.Services[s.Service.Key] = s
	}
	l.src.Push(delta)
	l.src.SetSynced(true)
	// A generous evaluation deadline: under TCG on a loaded host (load ~40)
	// the guest stalls for seconds, and an evaluation that passes its
	// deadline leaves the Service on uniform weights. The WebAssembly
	// tests bound their modules with the runtime's own deadline.
	stage := policystage.Config{Policies: pols, Deadline: time.Minute, StatsInterval: tick}
	if reporter != nil {
		stage.Reporter = reporter
	}
	l.loop = reconcile.New(reconcile.Config{
		NodeName: "lab", Source: l.src, Planner: plan.New(plan.Options{}), Dataplane: l.dp,
		Now: l.clock.Now, PolicyStage: stage,
	})
	return l
}

// sync runs one sync of the loop, failing the test on an error.
func (l *policyLoop) sync(t *testing.T) {
	t.Helper()
	if _, err := l.loop.Sync(t.Context()); err != nil {
		t.Fatalf("Sync: %v", err)
	}
}

// policyService is ClusterIP Service lab/name at vip, port 80 (http),
// with the policy, over backendEndpoints.
func policyService(name, vip, policy string) model.ServiceState {
	return model.ServiceState{
		Service: &model.Service{Key: svcKey(name), Type: model.ClusterIP, ClusterIPs: []netip.Addr{netip.MustParseAddr(vip)}, Policy: policy,
			Ports: []model.ServicePort{{Name: "http", Protocol: model.TCP, Port: 80}}},
		Endpoints: backendEndpoints(),
	}
}

func backendEndpoints() []model.Endpoint {
	var eps []model.Endpoint
	for _, be := range topo.Backends {
		eps = append(eps, model.Endpoint{Addr: be.IPv4, Port: HTTPPort, PortName: "http", Protocol: model.TCP,
			NodeName: "node-" + be.Name, Ready: true, Serving: true})
	}
	return eps
}

// backendDests returns the lab backends as IPVS destinations with the
// given weights, in topo.Backends' order.
func backendDests(w ...uint32) []ipvs.Destination {
	var ds []ipvs.Destination
	for i, be := range topo.Backends {
		ds = append(ds, ipvs.Destination{DestinationKey: ipvs.DestinationKey{Addr: be.IPv4, Port: HTTPPort}, Weight: w[i]})
	}
	return ds
}

// ipvsTable returns the kernel's virtual services whose names start with
// prefix, with their destinations.
func ipvsTable(t *testing.T, prefix string) map[string][]ipvs.Destination {
	t.Helper()
	all, _ := kernelDump(t)
	out := map[string][]ipvs.Destination{}
	for name, ds := range all {
		if strings.HasPrefix(name, prefix) {
			out[name] = ds
		}
	}
	return out
}

// checkSplit sends n connections from the client to vip and checks how
// many each backend answered.
func checkSplit(t *testing.T, what string, vip netip.AddrPort, n int, want map[string]int) {
	t.Helper()
	got, err := Split(t.Context(), topo.Client, "tcp", vip, n)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s: answers per backend (-want +got):\n%s", what, diff)
	}
}

// holdConnections opens n connections from the client to vip, kept open
// until the test ends, and returns how many each backend answered.
func holdConnections(t *testing.T, vip netip.AddrPort, n int) map[string]int {
	t.Helper()
	held := map[string]int{}
	for range n {
		c, err := DialHTTP(t.Context(), topo.Client, vip)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		name, err := c.Get()
		if err != nil {
			t.Fatal(err)
		}
		held[name]++
	}
	return held
}

// TestPolicyWeightsDriveTraffic runs the reconcile loop (planner, policy
// stage, ipvs.Dataplane on the guest's kernel) for a ClusterIP Service
// with an in-process policy. Its weights 1/2/3 are what IPVS holds and
// real traffic splits exactly 1:2:3. Then six held connections (1/2/3 per
// backend) reach the policy as live IPVS statistics on the next tick, and
// its least-connections weights 3/2/1 are again what IPVS holds and how
// traffic splits.
func TestPolicyWeightsDriveTraffic(t *testing.T) {
	requireGuest(t)
	clearPlan(t)
	const tick = time.Second
	vip := netip.MustParseAddrPort("10.96.5.10:80")
	pol := &labPolicy{}
	pols := plugintest.NewPolicies("split")
	pols.Set("split", plugintest.NewFunc("split", pol.evaluate), nil, nil)
	pl := newPolicyLoop(t, pols, nil, tick, policyService("policy", vip.Addr().String(), "split"))
	dp, clock := pl.dp, pl.clock
	syncLoop := func() { t.Helper(); pl.sync(t) }
	table := func() map[string][]ipvs.Destination { return ipvsTable(t, "TCP/10.96.5.10:80 ") }
	want := func(w ...uint32) map[string][]ipvs.Destination {
		return map[string][]ipvs.Destination{"TCP/10.96.5.10:80 wrr flags=0x0 persist=0s": backendDests(w...)}
	}
	split := func(what string, n int, want map[string]int) { t.Helper(); checkSplit(t, what, vip, n, want) }

	syncLoop()
	if diff := cmp.Diff(want(1, 2, 3), table(), cmpLab); diff != "" {
		t.Fatalf("IPVS table with the static policy (-want +got):\n%s", diff)
	}
	split("static 1/2/3", 30, map[string]int{"be1": 5, "be2": 10, "be3": 15})

	// The kernel's estimator turns traffic into rates on its tick (every
	// 2 s of guest time) as a moving average, which Stats reports in
	// whole connections per second: a backend shows a connection rate
	// only once it gets more than about one connection per tick. be1 has
	// a sixth of the traffic, so that takes over 3 connections/s in all,
	// more than a guest on a loaded host makes one request at a time
	// (about one per second at load 38, issue 9). So until every backend
	// shows rates, bursts of ten wrr cycles (which keeps the scheduler's
	// position) go through as concurrent connections, each followed by
	// a little over a tick of reads.
	vk := model.VirtualServiceKey{Addr: vip.Addr(), Port: vip.Port(), Protocol: model.TCP}
	var last map[netip.AddrPort]plugin.EndpointStats
	rated := func() bool {
		t.Helper()
		for until := time.Now().Add(2500 * time.Millisecond); ; time.Sleep(200 * time.Millisecond) {
			stats, err := dp.Stats([]model.VirtualServiceKey{vk})
			if err != nil {
				t.Fatalf("Stats: %v", err)
			}
			last = stats[vk]
			n := 0
			for _, st := range last {
				if st.ConnRate > 0 && st.BytesInRate > 0 && st.BytesOutRate > 0 {
					n++
				}
			}
			if n == len(topo.Backends) {
				return true
			}
			if time.Now().After(until) {
				return false
			}
		}
	}
	const burst = 60
	bursts := 0
	for deadline := time.Now().Add(5 * time.Minute); !rated(); bursts++ {
		if time.Now().After(deadline) {
			t.Fatalf("no connection and byte rates for every backend within 5 minutes (%d bursts of %d connections); last read %v", bursts, burst, last)
		}
		got, err := SplitConcurrently(t.Context(), topo.Client, vip, burst)
		if err != nil {
			t.Fatalf("burst %d: %v", bursts+1, err)
		}
		if diff := cmp.Diff(map[string]int{"be1": 10, "be2": 20, "be3": 30}, got); diff != "" {
			t.Fatalf("burst %d of ten wrr cycles: answers per backend (-want +got):\n%s", bursts+1, diff)
		}
	}
	t.Logf("rates after 30 connections and %d bursts of %d: %v", bursts, burst, last)

	// Hold six connections: one wrr cycle, so 1/2/3 per backend.
	if diff := cmp.Diff(map[string]int{"be1": 1, "be2": 2, "be3": 3}, holdConnections(t, vip, 6)); diff != "" {
		t.Fatalf("held connections per backend (-want +got):\n%s", diff)
	}

	pol.setLeastConns()
	clock.Step(tick)
	syncLoop()
	if diff := cmp.Diff(map[string]uint32{"be1": 1, "be2": 2, "be3": 3}, pol.lastSeen()); diff != "" {
		t.Errorf("active connections the policy saw (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want(3, 2, 1), table(), cmpLab); diff != "" {
		t.Fatalf("IPVS table with least connections (-want +got):\n%s", diff)
	}
	split("least connections 3/2/1", 30, map[string]int{"be1": 15, "be2": 10, "be3": 5})
}
