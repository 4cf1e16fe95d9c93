//go:build linux

package labtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/core/runner/runnertest"
	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/test/netns"
)

// These tests drive ipvs.Dataplane with real traffic. They are not
// parallel: a Full apply deletes every service on switchyard0's addresses
// that its plan does not want, which would include other tests' services.

// countingKernel counts the calls that change the IPVS table.
type countingKernel struct {
	ipvs.Kernel
	n atomic.Int32
}

// ReadTable reads the table in one pass, as the dataplane's full resync
// does with the real Kernel.
func (c *countingKernel) ReadTable() (map[model.VirtualServiceKey][]ipvs.DestinationState, error) {
	return c.Kernel.(ipvs.TableReader).ReadTable()
}

func (c *countingKernel) AddService(s ipvs.Service) error {
	c.n.Add(1)
	return c.Kernel.AddService(s)
}

func (c *countingKernel) UpdateService(s ipvs.Service) error {
	c.n.Add(1)
	return c.Kernel.UpdateService(s)
}

func (c *countingKernel) DeleteService(k model.VirtualServiceKey) error {
	c.n.Add(1)
	return c.Kernel.DeleteService(k)
}

func (c *countingKernel) AddDestination(k model.VirtualServiceKey, d ipvs.Destination) error {
	c.n.Add(1)
	return c.Kernel.AddDestination(k, d)
}

func (c *countingKernel) UpdateDestination(k model.VirtualServiceKey, d ipvs.Destination) error {
	c.n.Add(1)
	return c.Kernel.UpdateDestination(k, d)
}

func (c *countingKernel) DeleteDestination(k model.VirtualServiceKey, d ipvs.DestinationKey) error {
	c.n.Add(1)
	return c.Kernel.DeleteDestination(k, d)
}

// countingAddresses counts binds and unbinds.
type countingAddresses struct {
	ipvs.Addresses
	n atomic.Int32
}

func (c *countingAddresses) AddAddr(name string, a netip.Addr) error {
	c.n.Add(1)
	return c.Addresses.AddAddr(name, a)
}

func (c *countingAddresses) DelAddr(name string, a netip.Addr) error {
	c.n.Add(1)
	return c.Addresses.DelAddr(name, a)
}

// labDataplane is a Dataplane on the guest's kernel with counted changes.
type labDataplane struct {
	*ipvs.Dataplane
	kernel *countingKernel
	addrs  *countingAddresses
	clock  *runnertest.Clock
}

func (l *labDataplane) changes() int { return int(l.kernel.n.Load() + l.addrs.n.Load()) }

func newLabDataplane(t *testing.T, opts ...func(*ipvs.Config)) *labDataplane {
	t.Helper()
	k, err := ipvs.NewNetlink()
	if err != nil {
		t.Fatal(err)
	}
	a, err := ipvs.NewNetlinkAddresses()
	if err != nil {
		t.Fatal(err)
	}
	ct, err := ipvs.NewNetlinkConntrack()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close(); a.Close(); ct.Close() })
	l := &labDataplane{kernel: &countingKernel{Kernel: k}, addrs: &countingAddresses{Addresses: a},
		clock: runnertest.NewClock(time.Now())}
	cfg := ipvs.Config{
		Kernel: l.kernel, Addresses: l.addrs, Sysctls: ipvs.ProcSysctls{}, Conntrack: ct,
		StrictARP: true, DrainTimeout: time.Hour, Now: l.clock.Now,
	}
	for _, o := range opts {
		o(&cfg)
	}
	l.Dataplane, err = ipvs.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// clearPlan removes everything the tests programmed.
func clearPlan(t *testing.T) {
	t.Helper()
	t.Cleanup(func() {
		l := newLabDataplane(t)
		if err := l.Apply(context.Background(), plugin.Update{Plan: &model.Plan{}, Full: true}); err != nil {
			t.Errorf("clear the dataplane: %v", err)
		}
	})
}

// backends returns destinations on be1..beN with the given weights; a
// negative weight leaves that backend out.
func backends(v6 bool, port uint16, weights ...int) []model.Destination {
	var out []model.Destination
	for i, w := range weights {
		if w < 0 {
			continue
		}
		addr := topo.Backends[i].IPv4
		if v6 {
			addr = topo.Backends[i].IPv6
		}
		out = append(out, model.Destination{Addr: addr, Port: port, Weight: uint32(w)})
	}
	return out
}

func clusterIP(vip string, port uint16, proto model.Protocol, sched string, dests []model.Destination) model.VirtualService {
	return model.VirtualService{
		VirtualServiceKey: model.VirtualServiceKey{Addr: netip.MustParseAddr(vip), Port: port, Protocol: proto},
		Kind:              model.FrontendClusterIP, Scheduler: sched, Destinations: dests,
	}
}

func planOf(vss map[string]model.VirtualService) *model.Plan {
	p := &model.Plan{Services: map[model.ServiceKey]*model.ServicePlan{}}
	for name, vs := range vss {
		k := model.ServiceKey{Namespace: "lab", Name: name}
		p.Services[k] = &model.ServicePlan{Key: k, VirtualServices: []model.VirtualService{vs}}
	}
	return p
}

func svcKey(name string) model.ServiceKey { return model.ServiceKey{Namespace: "lab", Name: name} }

// frontend is clusterIP's virtual service as a frontend of kind, with
// externalTrafficPolicy Local when local.
func frontend(vip string, port uint16, kind model.FrontendKind, local bool, dests []model.Destination) model.VirtualService {
	vs := clusterIP(vip, port, model.TCP, "rr", dests)
	vs.Kind, vs.Local = kind, local
	return vs
}

// seenBy is which backend answered a connection and the source address
// it saw.
type seenBy struct {
	Backend string
	Source  netip.Addr
}

// sourceCase is a connection from a namespace to target and what the
// backend should see; a zero want means the connection is refused.
type sourceCase struct {
	name   string
	from   *Namespace
	target string
	want   seenBy
}

// checkSources opens each case's connection (Source) and compares who
// answered, seeing which source, with the case's want.
func checkSources(t *testing.T, phase string, cases []sourceCase) {
	t.Helper()
	for _, tc := range cases {
		name := tc.name
		if phase != "" {
			name = phase + ": " + name
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		backend, src, err := Source(ctx, tc.from, netip.MustParseAddrPort(tc.target))
		cancel()
		if tc.want == (seenBy{}) {
			// No endpoint to take it: IPVS rejects the SYN with an ICMP
			// port unreachable, a refused connection.
			if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("%s: answered by %s (seen as %s), err %v; want refused", name, backend, src, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if diff := cmp.Diff(tc.want, seenBy{backend, src}, cmpLab); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
}

// dialFirst opens a keep-alive HTTP connection from the client to target,
// closed when the test ends, and returns it with the backend that
// answered its first request.
func dialFirst(t *testing.T, target netip.AddrPort) (*HTTPConn, string) {
	t.Helper()
	conn, err := DialHTTP(t.Context(), topo.Client, target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	first, err := conn.Get()
	if err != nil {
		t.Fatal(err)
	}
	return conn, first
}

// addForeignService adds an IPVS service Switchyard does not own, as
// another tool would, deleted when the test ends.
func addForeignService(t *testing.T, svc ipvs.Service) {
	t.Helper()
	k, err := ipvs.NewNetlink()
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if err := k.AddService(svc); err != nil {
		t.Fatalf("add the foreign service: %v", err)
	}
	t.Cleanup(func() {
		k, err := ipvs.NewNetlink()
		if err != nil {
			t.Error(err)
			return
		}
		defer k.Close()
		k.DeleteService(svc.VirtualServiceKey)
	})
}

// kernelDump is the IPVS table and switchyard0's addresses, without
// connection counts.
func kernelDump(t *testing.T) (map[string][]ipvs.Destination, []netip.Addr) {
	t.Helper()
	k, err := ipvs.NewNetlink()
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	svcs, err := k.Services()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]ipvs.Destination{}
	for _, s := range svcs {
		ds, err := k.Destinations(s.VirtualServiceKey)
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("%s/%s:%d %s flags=%#x persist=%s", s.Protocol, s.Addr, s.Port, s.Scheduler, uint32(s.Flags), s.Persistence)
		out[name] = []ipvs.Destination{}
		for _, d := range ds {
			out[name] = append(out[name], d.Destination)
		}
	}
	a, err := ipvs.NewNetlinkAddresses()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	addrs, err := a.Addrs(DummyName)
	if err != nil {
		t.Fatal(err)
	}
	return out, addrs
}

var cmpLab = cmp.Options{cmpopts.EquateComparable(netip.Addr{}), cmpopts.EquateEmpty()}

// TestDataplaneSplitsAndSurvivesRestart programs rr and wrr services over
// TCP and UDP, IPv4 and IPv6, checks the exact splits, then restarts the
// dataplane with an established connection open: the new Dataplane's Full
// apply of the same plan changes no kernel object and the connection keeps
// working.
func TestDataplaneSplitsAndSurvivesRestart(t *testing.T) {
	requireGuest(t)
	clearPlan(t)
	plan := planOf(map[string]model.VirtualService{
		"rr":    clusterIP("10.96.1.10", 80, model.TCP, "rr", backends(false, HTTPPort, 1, 1, 1)),
		"wrr":   clusterIP("10.96.1.11", 80, model.TCP, "wrr", backends(false, HTTPPort, 1, 2, 3)),
		"udp":   clusterIP("10.96.1.12", 53, model.UDP, "", backends(false, UDPPort, 1, 1, 1)),
		"rr6":   clusterIP("fd00:96::1:10", 80, model.TCP, "rr", backends(true, HTTPPort, 1, 1, 1)),
		"mh":    clusterIP("10.96.1.13", 80, model.TCP, "mh", backends(false, HTTPPort, 1, 1, 1)),
		"wrr-0": clusterIP("10.96.1.14", 80, model.TCP, "wrr", backends(false, HTTPPort, 1, 2, 0)),
	})
	plan.Services[svcKey("mh")].VirtualServices[0].Flags = []string{"mh-port"}
	plan.Services[svcKey("mh")].VirtualServices[0].AffinityTimeout = 0
	dp := newLabDataplane(t)
	start := time.Now()
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	t.Logf("first Apply: %s, %d kernel changes", time.Since(start).Round(time.Millisecond), dp.changes())

	for _, tc := range []struct {
		network, vip string
		port         uint16
		from         *Namespace
		n            int
		want         map[string]int
	}{
		{"tcp", "10.96.1.10", 80, topo.Client, 30, map[string]int{"be1": 10, "be2": 10, "be3": 10}},
		{"tcp", "10.96.1.10", 80, Root, 15, map[string]int{"be1": 5, "be2": 5, "be3": 5}},
		{"tcp", "10.96.1.11", 80, topo.Client, 30, map[string]int{"be1": 5, "be2": 10, "be3": 15}},
		{"udp", "10.96.1.12", 53, topo.Client, 30, map[string]int{"be1": 10, "be2": 10, "be3": 10}},
		{"tcp", "fd00:96::1:10", 80, topo.Client, 15, map[string]int{"be1": 5, "be2": 5, "be3": 5}},
		{"tcp", "10.96.1.14", 80, topo.Client, 15, map[string]int{"be1": 5, "be2": 10}},
	} {
		got, err := Split(t.Context(), tc.from, tc.network, netip.AddrPortFrom(netip.MustParseAddr(tc.vip), tc.port), tc.n)
		if err != nil {
			t.Fatalf("traffic to %s: %v", tc.vip, err)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s %s from %s: answers per backend (-want +got):\n%s", tc.network, tc.vip, tc.from.Name, diff)
		}
	}
	// mh with mh-port: every backend gets some of 30 flows.
	got, err := Split(t.Context(), topo.Client, "tcp", netip.MustParseAddrPort("10.96.1.13:80"), 30)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Errorf("mh with mh-port: answers %v, want all three backends", got)
	}

	conn, first := dialFirst(t, netip.MustParseAddrPort("10.96.1.10:80"))
	table, addrs := kernelDump(t)

	// Restart: a new Dataplane, the same plan.
	if err := dp.Close(); err != nil {
		t.Fatal(err)
	}
	dp2 := newLabDataplane(t)
	start = time.Now()
	if err := dp2.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatalf("Apply after restart: %v", err)
	}
	t.Logf("Apply after restart: %s, %d kernel changes", time.Since(start).Round(time.Millisecond), dp2.changes())
	if n := dp2.changes(); n != 0 {
		t.Errorf("restart with the same plan made %d kernel changes, want 0", n)
	}
	table2, addrs2 := kernelDump(t)
	if diff := cmp.Diff(table, table2, cmpLab); diff != "" {
		t.Errorf("IPVS table across the restart (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(addrs, addrs2, cmpLab); diff != "" {
		t.Errorf("switchyard0 addresses across the restart (-before +after):\n%s", diff)
	}
	if again, err := conn.Get(); err != nil || again != first {
		t.Errorf("established connection after the restart: answer %q, %v; want %q", again, err, first)
	}
}

// TestDataplaneGracefulRemoval removes the backend of an established
// connection from the plan: the connection keeps working, new connections
// avoid the backend, and its real server is deleted once the drain timeout
// passes (its closed connection lingers in TIME_WAIT).
func TestDataplaneGracefulRemoval(t *testing.T) {
	requireGuest(t)
	clearPlan(t)
	target := netip.MustParseAddrPort("10.96.1.20:80")
	vs := clusterIP("10.96.1.20", 80, model.TCP, "rr", backends(false, HTTPPort, 1, 1, 1))
	plan := planOf(map[string]model.VirtualService{"web": vs})
	dp := newLabDataplane(t)
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatal(err)
	}
	conn, first := dialFirst(t, target)
	weights := []int{1, 1, 1}
	for i, be := range topo.Backends {
		if be.Name == first {
			weights[i] = -1
		}
	}
	plan.Services[svcKey("web")].VirtualServices[0].Destinations = backends(false, HTTPPort, weights...)
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Changed: []model.ServiceKey{svcKey("web")}}); err != nil {
		t.Fatal(err)
	}
	others := names(first)
	got, err := Split(t.Context(), topo.Client, "tcp", target, 20)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int{others[0]: 10, others[1]: 10}, got); diff != "" {
		t.Errorf("new connections after removing %s (-want +got):\n%s", first, diff)
	}
	if again, err := conn.Get(); err != nil || again != first {
		t.Errorf("established connection after removing its backend: answer %q, %v; want %q", again, err, first)
	}
	if err := dp.Drain(); err != nil {
		t.Fatal(err)
	}
	if n := dp.Draining(); n != 1 {
		t.Errorf("draining real servers with a connection open = %d, want 1", n)
	}
	conn.Close()
	dp.clock.Step(time.Hour)
	if err := dp.Drain(); err != nil {
		t.Fatal(err)
	}
	if n := dp.Draining(); n != 0 {
		t.Errorf("draining real servers after the timeout = %d, want 0", n)
	}
	table, _ := kernelDump(t)
	want := []ipvs.Destination{}
	for _, d := range backends(false, HTTPPort, weights...) {
		want = append(want, ipvs.Destination{DestinationKey: ipvs.DestinationKey{Addr: d.Addr, Port: d.Port}, Weight: 1})
	}
	if diff := cmp.Diff(want, table["TCP/10.96.1.20:80 rr flags=0x0 persist=0s"], cmpLab); diff != "" {
		t.Errorf("real servers after draining (-want +got):\n%s", diff)
	}
}

// udpConntrack counts the node's UDP conntrack entries to target whose
// reply comes from backend.
func udpConntrack(t *testing.T, target netip.AddrPort, backend netip.Addr) int {
	t.Helper()
	// A dump interrupted by a concurrent change is read again.
	flows, err := netlink.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET)
	for i := 0; i < 5 && errors.Is(err, netlink.ErrDumpInterrupted); i++ {
		flows, err = netlink.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET)
	}
	if err != nil {
		t.Fatalf("list conntrack: %v", err)
	}
	n := 0
	for _, f := range flows {
		dst, _ := netip.AddrFromSlice(f.Forward.DstIP)
		src, _ := netip.AddrFromSlice(f.Reverse.SrcIP)
		if f.Forward.Protocol == unix.IPPROTO_UDP && dst.Unmap() == target.Addr() &&
			f.Forward.DstPort == target.Port() && src.Unmap() == backend {
			n++
		}
	}
	return n
}

// trackConnections makes the node's namespace track connections, as it
// does on any node with NAT rules: netfilter registers its conntrack hooks
// in a namespace only once a rule needs them, here one that loads the
// conntrack state, in a table of the test's own, removed when the test
// ends.
func trackConnections(t *testing.T) {
	t.Helper()
	c, err := nftables.New()
	if err != nil {
		t.Fatalf("nftables: %v", err)
	}
	table := c.AddTable(&nftables.Table{Name: "labtest-conntrack", Family: nftables.TableFamilyINet})
	chain := c.AddChain(&nftables.Chain{
		Name: "track", Table: table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityFilter,
	})
	c.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Counter{},
	}})
	if err := c.Flush(); err != nil {
		t.Fatalf("create nftables table %s: %v", table.Name, err)
	}
	t.Cleanup(func() {
		c.DelTable(table)
		if err := c.Flush(); err != nil {
			t.Errorf("delete nftables table %s: %v", table.Name, err)
		}
	})
}

// TestDataplaneUDPFlowMoves removes the backend of a live UDP flow: the
// same flow (same source port) reaches another backend at once, because
// the dataplane deletes the UDP real server (UDP flows are never active)
// and its conntrack entries.
func TestDataplaneUDPFlowMoves(t *testing.T) {
	requireGuest(t)
	clearPlan(t)
	trackConnections(t)
	target := netip.MustParseAddrPort("10.96.1.30:53")
	plan := planOf(map[string]model.VirtualService{
		"dns": clusterIP("10.96.1.30", 53, model.UDP, "rr", backends(false, UDPPort, 1, 1, -1)),
	})
	dp := newLabDataplane(t)
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatal(err)
	}
	port, err := netns.NextSourcePort()
	if err != nil {
		t.Fatal(err)
	}
	ask := func() string {
		t.Helper()
		var name string
		err := topo.Client.Do(func() error {
			var err error
			name, err = udpAsk(t.Context(), port, target)
			return err
		})
		if err != nil {
			t.Fatalf("udp flow from port %d: %v", port, err)
		}
		return name
	}
	first := ask()
	if again := ask(); again != first {
		t.Fatalf("same flow answered by %s then %s", first, again)
	}
	weights := []int{1, 1, -1}
	var removed netip.Addr
	for i, be := range topo.Backends {
		if be.Name == first {
			weights[i] = -1
			removed = be.IPv4
		}
	}
	if n := udpConntrack(t, target, removed); n == 0 {
		t.Errorf("no conntrack entry from %s to %s before the removal: is net.ipv4.vs.conntrack on?", target, removed)
	}
	plan.Services[svcKey("dns")].VirtualServices[0].Destinations = backends(false, UDPPort, weights...)
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Changed: []model.ServiceKey{svcKey("dns")}}); err != nil {
		t.Fatal(err)
	}
	if n := dp.Draining(); n != 0 {
		t.Errorf("draining UDP real servers = %d, want 0 (deleted at once)", n)
	}
	// Before any new packet could expire it, the flow's conntrack entry
	// towards the removed backend is gone.
	if n := udpConntrack(t, target, removed); n != 0 {
		t.Errorf("conntrack entries from %s to removed backend %s: %d, want 0", target, removed, n)
	}
	if moved := ask(); moved == first {
		t.Errorf("flow still answered by removed backend %s", first)
	}
}

// TestDataplaneUDPFlowFindsNewEndpoints reproduces k/k#19029: a UDP
// client sends to a service address before the service has endpoints
// (here, before it is programmed at all, the node routes the address
// elsewhere, as a node's default route would), which leaves a conntrack
// entry of the unanswered flow. The service then appears without
// endpoints (IPVS drops the datagrams and the entry stays), then gets
// endpoints: the dataplane deletes the entry, and the same flow (same
// source port) is answered by a backend. Without the deletion the entry
// stays, but here the flow is answered all the same (seen): IPVS does its
// own NAT, so what the stale entry breaks is NAT that nftables decides on
// a flow's first packet (masquerade), on paths this lab does not have.
func TestDataplaneUDPFlowFindsNewEndpoints(t *testing.T) {
	requireGuest(t)
	clearPlan(t)
	trackConnections(t)
	target := netip.MustParseAddrPort("10.96.1.31:53")
	elsewhere := &netlink.Route{
		Dst: &net.IPNet{IP: target.Addr().AsSlice(), Mask: net.CIDRMask(32, 32)},
		Gw:  topo.Backends[0].IPv4.AsSlice(),
	}
	if err := netlink.RouteAdd(elsewhere); err != nil {
		t.Fatalf("route %s elsewhere: %v", target.Addr(), err)
	}
	port, err := netns.NextSourcePort()
	if err != nil {
		t.Fatal(err)
	}
	// ask sends the flow's datagram; unanswered tells it to give up after
	// silence (three sends) rather than answerTimeout.
	ask := func(unanswered bool) (string, error) {
		ctx, cancel := t.Context(), context.CancelFunc(func() {})
		if unanswered {
			ctx, cancel = context.WithTimeout(ctx, silence)
		}
		defer cancel()
		var name string
		err := topo.Client.Do(func() error {
			var err error
			name, err = udpAsk(ctx, port, target)
			return err
		})
		return name, err
	}
	if name, err := ask(true); err == nil {
		t.Fatalf("flow to %s before it is programmed answered by %s", target, name)
	}
	if err := netlink.RouteDel(elsewhere); err != nil {
		t.Fatalf("delete route %s: %v", target.Addr(), err)
	}
	if n := udpConntrack(t, target, target.Addr()); n == 0 {
		t.Fatalf("no conntrack entry of the unanswered flow to %s: the test cannot tell", target)
	}

	plan := planOf(map[string]model.VirtualService{
		"dns": clusterIP(target.Addr().String(), target.Port(), model.UDP, "rr", nil),
	})
	dp := newLabDataplane(t)
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatal(err)
	}
	if name, err := ask(true); err == nil {
		t.Fatalf("flow to %s without endpoints answered by %s", target, name)
	}
	if n := udpConntrack(t, target, target.Addr()); n == 0 {
		t.Fatalf("the unanswered flow's conntrack entry to %s is gone before the service has endpoints", target)
	}
	plan.Services[svcKey("dns")].VirtualServices[0].Destinations = backends(false, UDPPort, 1, 1, 1)
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Changed: []model.ServiceKey{svcKey("dns")}}); err != nil {
		t.Fatal(err)
	}
	if n := udpConntrack(t, target, target.Addr()); n != 0 {
		t.Errorf("conntrack entries of the unanswered flow to %s after endpoints appeared: %d, want 0", target, n)
	}
	name, err := ask(false)
	if err != nil {
		t.Fatalf("same flow after endpoints appeared: %v", err)
	}
	if !slices.ContainsFunc(topo.Backends, func(b *Backend) bool { return b.Name == name }) {
		t.Errorf("flow answered by %q, want a backend", name)
	}
}

// TestDataplaneAffinityAndNoEndpoints checks persistence for ClientIP
// affinity (every new connection from one client goes to one backend, on
// both the client namespace and the node) and that a virtual service
// without real servers refuses connections at once: IPVS passes the packet
// to the local stack, which holds the address on switchyard0 and has no
// listener on the port, so the client gets a reset, not a hang.
func TestDataplaneAffinityAndNoEndpoints(t *testing.T) {
	requireGuest(t)
	clearPlan(t)
	sticky := clusterIP("10.96.1.40", 80, model.TCP, "rr", backends(false, HTTPPort, 1, 1, 1))
	sticky.AffinityTimeout = 3 * time.Hour
	plan := planOf(map[string]model.VirtualService{
		"sticky": sticky,
		"empty":  clusterIP("10.96.1.41", 80, model.TCP, "rr", nil),
	})
	dp := newLabDataplane(t)
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatal(err)
	}
	for _, from := range []*Namespace{topo.Client, Root} {
		got, err := Split(t.Context(), from, "tcp", netip.MustParseAddrPort("10.96.1.40:80"), 12)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 {
			t.Errorf("affinity from %s: answers %v, want one backend for all 12", from.Name, got)
		}
	}

	// A refusal, not a timeout: the client is not left waiting.
	_, err := Split(t.Context(), topo.Client, "tcp", netip.MustParseAddrPort("10.96.1.41:80"), 1)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("connection to a service without endpoints: %v, want connection refused", err)
	}
}

// deleteFirewallTable removes the dataplane's nftables table.
func deleteFirewallTable(t *testing.T) {
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	c.DelTable(&nftables.Table{Name: ipvs.TableName, Family: nftables.TableFamilyINet})
	if err := c.Flush(); err != nil {
		t.Errorf("delete table %s: %v", ipvs.TableName, err)
	}
}

// TestDataplaneMasqueradeNodeWithoutClusterCIDRs: with the default
// config (no cluster CIDRs) ClusterIP traffic from pods keeps its source,
// and the node's own is masqueraded. The node's connection to a ClusterIP
// gets the ClusterIP, local on the dummy link, as its source address; an
// endpoint on another node would answer it to that node, which holds the
// address too, and the connection would never complete (seen in the
// cluster lab, test/cluster: TestHostNetworkClientReachesClusterIPOnAnotherNode).
// Here the backend sees the node's own address instead of the ClusterIP.
func TestDataplaneMasqueradeNodeWithoutClusterCIDRs(t *testing.T) {
	requireGuest(t)
	clearPlan(t)
	t.Cleanup(func() { deleteFirewallTable(t) })
	plan := planOf(map[string]model.VirtualService{
		"cip": clusterIP("10.96.1.60", 80, model.TCP, "rr", backends(false, HTTPPort, 1, -1, -1)),
	})
	dp := newLabDataplane(t, func(c *ipvs.Config) { c.Firewall = ipvs.NewNFTables() })
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	checkSources(t, "", []sourceCase{
		{"from a pod it keeps its source", topo.Client, "10.96.1.60:80", seenBy{"be1", topo.ClientIPv4}},
		{"from the node it is masqueraded", Root, "10.96.1.60:80", seenBy{"be1", netip.MustParseAddr("10.244.1.1")}},
	})
}

// TestDataplaneMasquerade checks the nftables table: ClusterIP traffic
// from a pod (inside the cluster CIDRs) keeps its source, from the node
// (hostNetwork) it is masqueraded; LoadBalancer traffic with
// externalTrafficPolicy Cluster is masqueraded, with Local it keeps the
// client's address.
func TestDataplaneMasquerade(t *testing.T) {
	requireGuest(t)
	clearPlan(t)
	t.Cleanup(func() { deleteFirewallTable(t) })
	lb := func(vip string, local bool, dests []model.Destination) model.VirtualService {
		return frontend(vip, 80, model.FrontendLoadBalancer, local, dests)
	}
	nodePort := func(port uint16, local bool, dests []model.Destination) model.VirtualService {
		return frontend("10.244.0.1", port, model.FrontendNodePort, local, dests)
	}
	allowed := lb("10.96.2.3", false, backends(false, HTTPPort, 1, -1, -1))
	allowed.SourceRanges = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("10.244.0.0/24")}
	denied := lb("10.96.2.4", false, backends(false, HTTPPort, 1, -1, -1))
	denied.SourceRanges = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}
	plan := planOf(map[string]model.VirtualService{
		"cip":     clusterIP("10.96.1.50", 80, model.TCP, "rr", backends(false, HTTPPort, 1, -1, -1)),
		"lb":      lb("10.96.2.1", false, backends(false, HTTPPort, -1, 1, -1)),
		"local":   lb("10.96.2.2", true, backends(false, HTTPPort, -1, -1, 1)),
		"np":      nodePort(30080, false, backends(false, HTTPPort, -1, 1, -1)),
		"np-loc":  nodePort(30081, true, backends(false, HTTPPort, -1, 1, -1)),
		"allowed": allowed,
		"denied":  denied,
	})
	dp := newLabDataplane(t, func(c *ipvs.Config) {
		c.Firewall = ipvs.NewNFTables()
		c.Local.CIDRs = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/24")}
	})
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	checkSources(t, "", []sourceCase{
		{"ClusterIP from a pod keeps its source", topo.Client, "10.96.1.50:80", seenBy{"be1", topo.ClientIPv4}},
		{"ClusterIP from the node is masqueraded", Root, "10.96.1.50:80", seenBy{"be1", netip.MustParseAddr("10.244.1.1")}},
		{"LoadBalancer Cluster is masqueraded", topo.Client, "10.96.2.1:80", seenBy{"be2", netip.MustParseAddr("10.244.2.1")}},
		{"LoadBalancer Local keeps the client", topo.Client, "10.96.2.2:80", seenBy{"be3", topo.ClientIPv4}},
		{"NodePort Cluster is masqueraded", topo.Client, "10.244.0.1:30080", seenBy{"be2", netip.MustParseAddr("10.244.2.1")}},
		{"NodePort Local keeps the client", topo.Client, "10.244.0.1:30081", seenBy{"be2", topo.ClientIPv4}},
		{"a client inside loadBalancerSourceRanges passes", topo.Client, "10.96.2.3:80", seenBy{"be1", netip.MustParseAddr("10.244.1.1")}},
	})
	// Outside the ranges the SYN is dropped: no answer within a second,
	// where an allowed connection takes milliseconds.
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if name, src, err := Source(ctx, topo.Client, netip.MustParseAddrPort("10.96.2.4:80")); err == nil {
		t.Errorf("a client outside loadBalancerSourceRanges got an answer from %s (seen as %s)", name, src)
	}
}
