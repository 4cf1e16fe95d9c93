package policystage_test

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/model/modeltest"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/core/plugin/plugintest"
	"github.com/switchyard-lb/switchyard/core/policystage"
	"github.com/switchyard-lb/switchyard/core/runner/runnertest"
	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/ipvs/ipvstest"
)

// leastConns is a least-connections-like policy: each endpoint gets one
// more than the most active connections any endpoint has, less its own.
// It keeps the statistics it saw last.
type leastConns struct {
	mu   sync.Mutex
	seen map[netip.AddrPort]plugin.EndpointStats
}

func (p *leastConns) evaluate(_ context.Context, in *plugin.PolicyInput) (plugin.PolicyResult, error) {
	seen := make(map[netip.AddrPort]plugin.EndpointStats, len(in.Endpoints))
	var most uint32
	for _, ep := range in.Endpoints {
		seen[netip.AddrPortFrom(ep.Addr, ep.Port)] = ep.Stats
		most = max(most, ep.Stats.ActiveConns)
	}
	w := make([]uint32, len(in.Endpoints))
	for i, ep := range in.Endpoints {
		w[i] = most + 1 - ep.Stats.ActiveConns
	}
	p.mu.Lock()
	p.seen = seen
	p.mu.Unlock()
	return plugin.PolicyResult{Weights: w}, nil
}

func (p *leastConns) last() map[netip.AddrPort]plugin.EndpointStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen
}

// TestPolicySeesDataplaneStats runs the loop over the IPVS dataplane on
// the fake kernel: connection counts set in the kernel reach the policy on
// the statistics tick, summed over the Service port's frontends, and the
// weights the kernel holds follow them.
func TestPolicySeesDataplaneStats(t *testing.T) {
	const tick = 10 * time.Second
	kernel := ipvstest.NewFake()
	addrs := ipvstest.NewFakeAddresses()
	addrs.AddLink("eth0", "device")
	node := netip.MustParseAddr("192.168.1.10")
	if err := addrs.AddAddr("eth0", node); err != nil {
		t.Fatal(err)
	}
	dp, err := ipvs.New(ipvs.Config{Kernel: kernel, Addresses: addrs, Sysctls: ipvstest.NewFakeSysctls(map[string]string{
		"net/ipv4/ip_forward": "1", "net/ipv4/vs/conntrack": "1", "net/ipv4/vs/expire_nodest_conn": "1",
		"net/ipv4/vs/expire_quiescent_template": "1", "net/ipv4/vs/conn_reuse_mode": "0",
	})})
	if err != nil {
		t.Fatal(err)
	}
	lc := &leastConns{}
	pols := plugintest.NewPolicies("leastconns")
	fn := plugintest.NewFunc("leastconns", lc.evaluate)
	pols.Set("leastconns", fn, nil, nil)
	src := plugintest.NewSource()
	clock := runnertest.NewClock(t0)
	loop := newLoop(src, dp, clock.Now, policystage.Config{Policies: pols, Stats: dp, StatsInterval: tick})

	eps := []model.Endpoint{modeltest.Ready("10.244.1.2", "node-a"), modeltest.Ready("10.244.2.2", "node-b"), modeltest.Ready("10.244.3.2", "node-c")}
	web := modeltest.State(modeltest.ClusterIP(webKey, "10.96.0.1"), eps...)
	web.Service.Type = model.NodePort
	web.Service.Ports[0].NodePort = 30080
	src.Push(model.Delta{Nodes: map[string]*model.Node{"node-a": nodeA},
		Services: map[model.ServiceKey]model.ServiceState{webKey: web}})
	src.SetSynced(true)
	mustSync(t, loop)

	cip := model.VirtualServiceKey{Addr: modeltest.Addr("10.96.0.1"), Port: 80, Protocol: model.TCP}
	np := model.VirtualServiceKey{Addr: node, Port: 30080, Protocol: model.TCP}
	dst := func(s string) ipvs.DestinationKey {
		ap := netip.MustParseAddrPort(s)
		return ipvs.DestinationKey{Addr: ap.Addr(), Port: ap.Port()}
	}
	setConns := func(k model.VirtualServiceKey, d string, active uint32) {
		t.Helper()
		if err := kernel.SetConns(k, dst(d), active, 1); err != nil {
			t.Fatal(err)
		}
	}
	kernelWeights := func() map[model.VirtualServiceKey][]uint32 {
		out := map[model.VirtualServiceKey][]uint32{}
		for _, e := range kernel.Table() {
			for _, d := range e.Destinations {
				out[e.Service.VirtualServiceKey] = append(out[e.Service.VirtualServiceKey], d.Weight)
			}
		}
		return out
	}
	both := func(w ...uint32) map[model.VirtualServiceKey][]uint32 {
		return map[model.VirtualServiceKey][]uint32{cip: w, np: w}
	}
	stats := func(a1, a2, a3, inactive uint32) map[netip.AddrPort]plugin.EndpointStats {
		return map[netip.AddrPort]plugin.EndpointStats{
			netip.MustParseAddrPort("10.244.1.2:8080"): {ActiveConns: a1, InactiveConns: inactive},
			netip.MustParseAddrPort("10.244.2.2:8080"): {ActiveConns: a2, InactiveConns: inactive},
			netip.MustParseAddrPort("10.244.3.2:8080"): {ActiveConns: a3, InactiveConns: inactive},
		}
	}
	if diff := cmp.Diff(both(1, 1, 1), kernelWeights()); diff != "" {
		t.Fatalf("before any traffic, kernel weights (-want +got):\n%s", diff)
	}

	steps := []struct {
		name        string
		do          func()
		wantSeen    map[netip.AddrPort]plugin.EndpointStats
		wantWeights map[model.VirtualServiceKey][]uint32
		wantEvals   int // in all
	}{
		{
			name: "a tick reads the counters, summed over the ClusterIP and the NodePort",
			do: func() {
				setConns(cip, "10.244.1.2:8080", 4)
				setConns(cip, "10.244.2.2:8080", 1)
				setConns(np, "10.244.2.2:8080", 1)
				setConns(np, "10.244.3.2:8080", 0)
				clock.Step(tick)
			},
			// Inactive: 1 on each frontend an endpoint was set on.
			wantSeen: map[netip.AddrPort]plugin.EndpointStats{
				netip.MustParseAddrPort("10.244.1.2:8080"): {ActiveConns: 4, InactiveConns: 1},
				netip.MustParseAddrPort("10.244.2.2:8080"): {ActiveConns: 2, InactiveConns: 2},
				netip.MustParseAddrPort("10.244.3.2:8080"): {ActiveConns: 0, InactiveConns: 1},
			},
			wantWeights: both(1, 3, 5),
			wantEvals:   2,
		},
		{
			name: "between ticks an evaluation sees the last read, not the kernel",
			do: func() {
				setConns(cip, "10.244.1.2:8080", 0)
				clock.Step(tick / 2)
				src.Push(model.Delta{Services: map[model.ServiceKey]model.ServiceState{webKey: web}})
			},
			wantSeen: map[netip.AddrPort]plugin.EndpointStats{
				netip.MustParseAddrPort("10.244.1.2:8080"): {ActiveConns: 4, InactiveConns: 1},
				netip.MustParseAddrPort("10.244.2.2:8080"): {ActiveConns: 2, InactiveConns: 2},
				netip.MustParseAddrPort("10.244.3.2:8080"): {ActiveConns: 0, InactiveConns: 1},
			},
			wantWeights: both(1, 3, 5),
			wantEvals:   3,
		},
		{
			name: "the next tick follows the kernel",
			do: func() {
				setConns(np, "10.244.2.2:8080", 0)
				setConns(np, "10.244.1.2:8080", 0)
				setConns(cip, "10.244.3.2:8080", 0)
				setConns(cip, "10.244.2.2:8080", 0)
				setConns(np, "10.244.3.2:8080", 6)
				clock.Step(tick)
			},
			wantSeen:    stats(0, 0, 6, 2),
			wantWeights: both(7, 7, 1),
			wantEvals:   4,
		},
	}
	for _, s := range steps {
		s.do()
		mustSync(t, loop)
		if diff := cmp.Diff(s.wantSeen, lc.last()); diff != "" {
			t.Errorf("%s: the policy saw (-want +got):\n%s", s.name, diff)
		}
		if diff := cmp.Diff(s.wantWeights, kernelWeights()); diff != "" {
			t.Errorf("%s: kernel weights (-want +got):\n%s", s.name, diff)
		}
		if got := fn.Calls(); got != s.wantEvals {
			t.Errorf("%s: %d evaluations in all, want %d", s.name, got, s.wantEvals)
		}
	}
}
