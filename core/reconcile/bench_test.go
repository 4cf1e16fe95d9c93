package reconcile_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-lb/switchyard/core/election"
	"github.com/switchyard-lb/switchyard/core/healthcheck"
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plan"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/core/plugin/plugintest"
	"github.com/switchyard-lb/switchyard/core/policystage"
	"github.com/switchyard-lb/switchyard/core/reconcile"
	"github.com/switchyard-lb/switchyard/plugins/builtin"
)

// nopDataplane takes every update and does nothing: the loop's own work.
type nopDataplane struct{}

func (nopDataplane) Name() string                               { return "nop" }
func (nopDataplane) Apply(context.Context, plugin.Update) error { return nil }
func (nopDataplane) Close() error                               { return nil }

// nopAnnouncer takes every set and keeps none (plugintest's Announcer
// keeps every call).
type nopAnnouncer struct{}

func (nopAnnouncer) Name() string                                         { return "bgp" }
func (nopAnnouncer) Announce(context.Context, []model.Announcement) error { return nil }
func (nopAnnouncer) Close() error                                         { return nil }

// benchState is Service i of a cluster: a LoadBalancer Service (a
// ClusterIP one unless lb) with ten endpoints, the first on port
// 8000+gen%2.
func benchState(i, gen int, lb bool) model.ServiceState {
	a4 := func(a, b, c, d int) netip.Addr { return netip.AddrFrom4([4]byte{byte(a), byte(b), byte(c), byte(d)}) }
	svc := &model.Service{Key: model.ServiceKey{Namespace: "bench", Name: fmt.Sprintf("svc%d", i)}, Type: model.LoadBalancer,
		ClusterIPs: []netip.Addr{a4(10, 96, i>>8, i)}, LoadBalancerIPs: []netip.Addr{a4(198, 18, i>>8, i)},
		Ports: []model.ServicePort{{Name: "http", Protocol: model.TCP, Port: 80, NodePort: uint16(30000 + i%2000)}}}
	eps := make([]model.Endpoint, 10)
	for j := range eps {
		eps[j] = model.Endpoint{Addr: a4(10, 100+j, i>>8, i), Port: 8080, PortName: "http", Protocol: model.TCP, Ready: true, Serving: true, NodeName: "node-a"}
	}
	eps[0].Port = uint16(8000 + gen%2)
	if !lb {
		svc.Type, svc.LoadBalancerIPs, svc.Ports[0].NodePort = model.ClusterIP, nil, 0
	}
	return model.ServiceState{Service: svc, Endpoints: eps}
}

// BenchmarkSyncEndpointChange is one Sync taking one endpoint change of
// one of n ClusterIP or LoadBalancer Services (ten endpoints each; the
// LoadBalancer ones announced over BGP by this node), with the real
// planner and a dataplane that does nothing, with or without the policy
// stage (every Service on the built-in uniform policy, the daemon's
// default, with the daemon's statistics interval), and with or without
// gossip membership (the daemon has it whenever it has announcers): the
// reconcile loop's own cost of a change, which should not grow with the
// cluster.
func BenchmarkSyncEndpointChange(b *testing.B) {
	for _, bc := range []benchCase{{1000, false, false, false}, {10000, false, false, false}, {1000, true, false, false}, {10000, true, false, false},
		{1000, false, true, false}, {10000, false, true, false}, {1000, true, true, false}, {10000, true, true, false},
		{1000, true, false, true}, {10000, true, false, true}} {
		b.Run(bc.String(), func(b *testing.B) {
			src, loop := benchLoop(b, bc)
			gen := 0
			for b.Loop() {
				gen++
				st := benchState(42, gen, bc.lb)
				src.Push(model.Delta{Services: map[model.ServiceKey]model.ServiceState{st.Service.Key: st}})
				res, err := loop.Sync(b.Context())
				if err != nil {
					b.Fatal(err)
				}
				if res.Changed != 1 || res.Full {
					b.Fatalf("sync %d: %+v, want one Service changed, not full", gen, res)
				}
			}
		})
	}
}

// BenchmarkSyncAddressChange is one Sync taking a change of one
// LoadBalancer Service's address among n (with gossip, no policy stage):
// the old address is withdrawn before the dataplane applies and the new
// one announced after it, each time handing the announcer its whole set,
// as Announce is declarative.
func BenchmarkSyncAddressChange(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		bc := benchCase{n: n, lb: true, gossip: true}
		b.Run(bc.String(), func(b *testing.B) {
			src, loop := benchLoop(b, bc)
			gen := 0
			for b.Loop() {
				gen++
				st := benchState(42, 0, true)
				st.Service.LoadBalancerIPs = []netip.Addr{netip.AddrFrom4([4]byte{198, 19, 0, byte(gen % 2)})}
				src.Push(model.Delta{Services: map[model.ServiceKey]model.ServiceState{st.Service.Key: st}})
				if _, err := loop.Sync(b.Context()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSyncLocalEndpointChange is one Sync taking a change of the
// ready endpoints on this node of one of n LoadBalancer Services with
// externalTrafficPolicy Local, each with its health check (on listeners
// that never accept): the health check's count changes, no port does.
func BenchmarkSyncLocalEndpointChange(b *testing.B) {
	local := func(i, gen int) model.ServiceState {
		st := benchState(i, 0, true)
		st.Service.ExternalTrafficPolicy, st.Service.HealthCheckNodePort = model.PolicyLocal, uint16(10000+i)
		st.Endpoints[0].Ready = gen%2 == 0
		return st
	}
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			src := plugintest.NewSource()
			src.SetSynced(true)
			hc := healthcheck.NewServer(nil, nil, healthcheck.WithListen(func(string, string) (net.Listener, error) {
				return &idleListener{done: make(chan struct{})}, nil
			}))
			b.Cleanup(func() { hc.Close() })
			loop := reconcile.New(reconcile.Config{
				NodeName: "node-a", Source: src, Planner: plan.New(plan.Options{}), Dataplane: nopDataplane{}, Health: hc,
				Elected: []plugin.ElectedAnnouncer{{Announcer: nopAnnouncer{}, Mode: election.BGP}},
			})
			all := make(map[model.ServiceKey]model.ServiceState, n)
			for i := range n {
				st := local(i, 0)
				all[st.Service.Key] = st
			}
			src.Push(model.Delta{Services: all, Nodes: map[string]*model.Node{"node-a": {Name: "node-a", Ready: true,
				Addresses: []netip.Addr{netip.MustParseAddr("192.168.1.10")}}}})
			if _, err := loop.Sync(b.Context()); err != nil {
				b.Fatal(err)
			}
			gen := 0
			for b.Loop() {
				gen++
				st := local(42, gen)
				src.Push(model.Delta{Services: map[model.ServiceKey]model.ServiceState{st.Service.Key: st}})
				if _, err := loop.Sync(b.Context()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// idleListener is a listener that never accepts, until closed.
type idleListener struct {
	done chan struct{}
	once sync.Once
}

func (l *idleListener) Accept() (net.Conn, error) {
	<-l.done
	return nil, net.ErrClosed
}

func (l *idleListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *idleListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

// benchCase is a cluster of n Services (LoadBalancer ones when lb) for
// a loop with or without the policy stage and gossip membership.
type benchCase struct {
	n                    int
	lb, policies, gossip bool
}

func (bc benchCase) String() string {
	s := fmt.Sprintf("services=%d/lb=%t/policies=%t", bc.n, bc.lb, bc.policies)
	if bc.gossip {
		s += "/gossip=true"
	}
	return s
}

// benchLoop returns a loop that has synced bc's cluster, and its Source.
func benchLoop(b *testing.B, bc benchCase) (*plugintest.Source, *reconcile.Loop) {
	src := plugintest.NewSource()
	src.SetSynced(true)
	cfg := reconcile.Config{
		NodeName: "node-a", Source: src, Planner: plan.New(plan.Options{}), Dataplane: nopDataplane{},
		Elected: []plugin.ElectedAnnouncer{{Announcer: nopAnnouncer{}, Mode: election.BGP}},
	}
	if bc.policies {
		pols := plugintest.NewPolicies(builtin.UniformName)
		pols.Set(builtin.UniformName, builtin.Uniform{}, nil, nil)
		cfg.PolicyStage = policystage.Config{Policies: pols, StatsInterval: 10 * time.Second}
	}
	if bc.gossip {
		cfg.Alive = func(string) (bool, bool) { return true, true }
	}
	loop := reconcile.New(cfg)
	all := make(map[model.ServiceKey]model.ServiceState, bc.n)
	for i := range bc.n {
		st := benchState(i, 0, bc.lb)
		all[st.Service.Key] = st
	}
	src.Push(model.Delta{Services: all, Nodes: map[string]*model.Node{"node-a": {Name: "node-a", Ready: true,
		Addresses: []netip.Addr{netip.MustParseAddr("192.168.1.10")}}}})
	if _, err := loop.Sync(b.Context()); err != nil {
		b.Fatal(err)
	}
	return src, loop
}
