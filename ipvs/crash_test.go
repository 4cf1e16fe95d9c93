package ipvs_test

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/ipvs/ipvstest"
)

// crashRig is the kernel state a daemon leaves behind: fakes that outlive
// the Dataplanes built on them, each call going through one Crash.
type crashRig struct {
	*rig
	fw    *ipvstest.FakeFirewall
	crash *ipvstest.Crash
}

func newCrashRig(t *testing.T) *crashRig {
	t.Helper()
	r := &crashRig{rig: newRig(), fw: &ipvstest.FakeFirewall{}, crash: &ipvstest.Crash{}}
	// Something else's service on the node address: never touched.
	if err := r.kernel.AddService(rr(keyForeignNP)); err != nil {
		t.Fatal(err)
	}
	return r
}

// dataplane is a new daemon's Dataplane on the rig's kernel state.
func (r *crashRig) dataplane(t *testing.T) *ipvs.Dataplane {
	t.Helper()
	dp, err := ipvs.New(ipvs.Config{
		Kernel: r.crash.Kernel(r.kernel), Addresses: r.crash.Addresses(r.addrs), Sysctls: r.sysctls,
		Firewall: r.crash.Firewall(r.fw), Now: r.clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	return dp
}

// crashState is what survives a crash: the IPVS services, the addresses on
// switchyard0 and the owned keys the nftables table records.
type crashState struct {
	Services []model.VirtualServiceKey
	Bound    []netip.Addr
	Owned    []model.VirtualServiceKey
}

func (r *crashRig) state(t *testing.T) crashState {
	t.Helper()
	var s crashState
	for _, e := range r.kernel.Table() {
		s.Services = append(s.Services, e.Service.VirtualServiceKey)
	}
	s.Bound, _ = r.addrs.Addrs(ipvs.DefaultDummy)
	fw, err := r.fw.Load()
	if err != nil {
		t.Fatal(err)
	}
	s.Owned = fw.Owned
	return s
}

var keyForeignNP = model.VirtualServiceKey{Addr: nodeIP, Port: 9999, Protocol: model.TCP}

// onePlan is one Service with the given frontends, each to one backend.
func onePlan(kinds map[model.VirtualServiceKey]model.FrontendKind) *model.Plan {
	sp := &model.ServicePlan{Key: svcWeb}
	for k, kind := range kinds {
		sp.VirtualServices = append(sp.VirtualServices, model.VirtualService{VirtualServiceKey: k, Kind: kind,
			Destinations: []model.Destination{be("10.244.1.2", 8080, 1)}})
	}
	return &model.Plan{Services: map[model.ServiceKey]*model.ServicePlan{svcWeb: sp}}
}

// TestDataplaneCrashMidApply kills the daemon right after one kernel or
// table call of an Apply, then starts a new Dataplane on the kernel state
// it left: the restarted daemon owns everything its predecessor created,
// deletes what its plan no longer wants, cleans records of what is gone,
// and leaves a foreign service on the node address alone.
func TestDataplaneCrashMidApply(t *testing.T) {
	nodePort := onePlan(map[model.VirtualServiceKey]model.FrontendKind{keyNP: model.FrontendNodePort})
	clusterIP := onePlan(map[model.VirtualServiceKey]model.FrontendKind{keyA: model.FrontendClusterIP})
	both := onePlan(map[model.VirtualServiceKey]model.FrontendKind{keyA: model.FrontendClusterIP, keyNP: model.FrontendNodePort})
	empty := &model.Plan{}
	tests := []struct {
		name    string
		before  *model.Plan // applied without a crash, if set
		during  *model.Plan // the Apply that crashes
		crashOp ipvstest.Op
		after   *model.Plan // the restarted daemon's plan
		want    crashState
	}{
		{name: "NodePort created, Apply not finished: deleted when no longer wanted",
			during: nodePort, crashOp: ipvstest.OpAddService, after: empty,
			want: crashState{Services: []model.VirtualServiceKey{keyForeignNP}}},
		{name: "NodePort created, Apply not finished: kept when still wanted",
			during: nodePort, crashOp: ipvstest.OpAddService, after: nodePort,
			want: crashState{Services: []model.VirtualServiceKey{keyForeignNP, keyNP}, Owned: []model.VirtualServiceKey{keyNP}}},
		{name: "first start: NodePort recorded with the new table, not yet created: record dropped",
			during: nodePort, crashOp: ipvstest.OpFirewallSync, after: empty,
			want: crashState{Services: []model.VirtualServiceKey{keyForeignNP}}},
		{name: "NodePort recorded, not yet created: record dropped",
			before: clusterIP, during: both, crashOp: ipvstest.OpRecordOwned, after: clusterIP,
			want: crashState{Services: []model.VirtualServiceKey{keyA, keyForeignNP}, Bound: []netip.Addr{vipA}}},
		{name: "NodePort recorded, not yet created: created when still wanted",
			before: clusterIP, during: both, crashOp: ipvstest.OpRecordOwned, after: both,
			want: crashState{Services: []model.VirtualServiceKey{keyA, keyForeignNP, keyNP}, Bound: []netip.Addr{vipA},
				Owned: []model.VirtualServiceKey{keyNP}}},
		{name: "NodePort deleted, not yet unrecorded: record dropped",
			before: nodePort, during: empty, crashOp: ipvstest.OpDeleteService, after: empty,
			want: crashState{Services: []model.VirtualServiceKey{keyForeignNP}}},
		{name: "NodePort deleted, not yet unrecorded: created again when wanted",
			before: nodePort, during: empty, crashOp: ipvstest.OpDeleteService, after: nodePort,
			want: crashState{Services: []model.VirtualServiceKey{keyForeignNP, keyNP}, Owned: []model.VirtualServiceKey{keyNP}}},
		{name: "ClusterIP bound, not yet created: address unbound",
			during: clusterIP, crashOp: ipvstest.OpAddAddr, after: empty,
			want: crashState{Services: []model.VirtualServiceKey{keyForeignNP}}},
		{name: "ClusterIP created: deleted and unbound when no longer wanted",
			during: clusterIP, crashOp: ipvstest.OpAddService, after: empty,
			want: crashState{Services: []model.VirtualServiceKey{keyForeignNP}}},
		{name: "ClusterIP deleted, not yet unbound: address unbound",
			before: clusterIP, during: empty, crashOp: ipvstest.OpDeleteService, after: empty,
			want: crashState{Services: []model.VirtualServiceKey{keyForeignNP}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newCrashRig(t)
			if tc.before != nil {
				if err := r.dataplane(t).Apply(t.Context(), plugin.Update{Plan: tc.before, Full: true}); err != nil {
					t.Fatalf("Apply before the crash: %v", err)
				}
			}
			r.crash.After(tc.crashOp, 1)
			err := r.dataplane(t).Apply(t.Context(), plugin.Update{Plan: tc.during, Full: true})
			if !r.crash.Crashed() {
				t.Fatalf("the Apply made no %s call to crash after", tc.crashOp)
			}
			if !errors.Is(err, ipvstest.ErrCrashed) {
				t.Fatalf("the crashing Apply returned %v, want ErrCrashed", err)
			}
			r.crash.Restart()
			if err := r.dataplane(t).Apply(t.Context(), plugin.Update{Plan: tc.after, Full: true}); err != nil {
				t.Fatalf("Apply after the restart: %v", err)
			}
			if diff := cmp.Diff(tc.want, r.state(t), cmpAddrs); diff != "" {
				t.Errorf("kernel state after the restart (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDataplaneRecordsOwnershipFirst follows the table's transactions: a
// new NodePort costs one ownership record before its creation; endpoint
// changes and restarts without changes cost none.
func TestDataplaneRecordsOwnershipFirst(t *testing.T) {
	r := newCrashRig(t)
	local := onePlan(map[model.VirtualServiceKey]model.FrontendKind{keyA: model.FrontendClusterIP, keyNP: model.FrontendNodePort})
	for i := range local.Services[svcWeb].VirtualServices {
		local.Services[svcWeb].VirtualServices[i].Local = true // no masquerade rule for the NodePort
	}
	withNP := func(dest string) *model.Plan {
		p := onePlan(map[model.VirtualServiceKey]model.FrontendKind{keyA: model.FrontendClusterIP, keyNP: model.FrontendNodePort})
		for i := range p.Services[svcWeb].VirtualServices {
			p.Services[svcWeb].VirtualServices[i].Destinations = []model.Destination{be(dest, 8080, 1)}
		}
		return p
	}
	clusterIP := onePlan(map[model.VirtualServiceKey]model.FrontendKind{keyA: model.FrontendClusterIP})
	dp := r.dataplane(t)
	steps := []struct {
		name    string
		plan    *model.Plan
		restart bool
		// writes are the table's transactions in the step, mutations the
		// IPVS changes.
		writes, mutations int
		owned             []model.VirtualServiceKey
	}{
		{name: "first start: the table, nothing owned off the dummy", plan: clusterIP, writes: 1, mutations: 2},
		{name: "Local NodePort: its record, no rule change", plan: local, writes: 1, mutations: 2,
			owned: []model.VirtualServiceKey{keyNP}},
		{name: "Cluster NodePort: no new record, its masquerade rule", plan: withNP("10.244.1.2"), writes: 1,
			owned: []model.VirtualServiceKey{keyNP}},
		{name: "endpoint change: the hairpin set, no record", plan: withNP("10.244.2.2"), writes: 1, mutations: 6, // per service: add, drain, delete
			owned: []model.VirtualServiceKey{keyNP}},
		{name: "restart, nothing changed: nothing written", plan: withNP("10.244.2.2"), restart: true,
			owned: []model.VirtualServiceKey{keyNP}},
		{name: "NodePort gone: deleted, then its record and rule in one write", plan: clusterIP, writes: 1, mutations: 4},
		{name: "Cluster NodePort anew: its record first, then its rule", plan: withNP("10.244.1.2"), writes: 2, mutations: 2,
			owned: []model.VirtualServiceKey{keyNP}},
		{name: "restart, nothing changed again", plan: withNP("10.244.1.2"), restart: true,
			owned: []model.VirtualServiceKey{keyNP}},
	}
	for _, st := range steps {
		if st.restart {
			dp = r.dataplane(t)
		}
		writes, mutations := r.fw.Writes(), r.mutations()
		if err := dp.Apply(t.Context(), plugin.Update{Plan: st.plan, Full: true}); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		got := struct {
			Writes, Mutations int
			Owned             []model.VirtualServiceKey
		}{r.fw.Writes() - writes, r.mutations() - mutations, r.state(t).Owned}
		want := struct {
			Writes, Mutations int
			Owned             []model.VirtualServiceKey
		}{st.writes, st.mutations, st.owned}
		if diff := cmp.Diff(want, got, cmpAddrs); diff != "" {
			t.Errorf("%s (-want +got):\n%s", st.name, diff)
		}
	}
}

// failingBinds is Addresses whose binds fail.
type failingBinds struct{ ipvs.Addresses }

func (failingBinds) AddAddr(string, netip.Addr) error { return errors.New("injected bind failure") }

// TestDataplaneAddressBeforeService checks the dummy link's side of the
// ordering: a service is not created on an address that failed to bind
// (nothing would prove it ours after a restart), and an address stays
// bound while a service on it failed to delete.
func TestDataplaneAddressBeforeService(t *testing.T) {
	clusterIP := onePlan(map[model.VirtualServiceKey]model.FrontendKind{keyA: model.FrontendClusterIP})
	t.Run("bind fails", func(t *testing.T) {
		r := newRig()
		dp, err := ipvs.New(ipvs.Config{Kernel: r.kernel, Addresses: failingBinds{r.addrs}, Sysctls: r.sysctls})
		if err != nil {
			t.Fatal(err)
		}
		if err := dp.Apply(t.Context(), plugin.Update{Plan: clusterIP, Full: true}); err == nil {
			t.Fatal("Apply with a failing bind: no error")
		}
		if got := r.kernel.Table(); len(got) != 0 {
			t.Errorf("services created on an unbound address: %v", got)
		}
	})
	t.Run("delete fails", func(t *testing.T) {
		r := newRig()
		dp := r.dataplane(t)
		if err := dp.Apply(t.Context(), plugin.Update{Plan: clusterIP, Full: true}); err != nil {
			t.Fatal(err)
		}
		r.kernel.SetError(ipvstest.OpDeleteService, errors.New("injected"))
		if err := dp.Apply(t.Context(), plugin.Update{Plan: &model.Plan{}, Full: true}); err == nil {
			t.Fatal("Apply with a failing delete: no error")
		}
		if diff := cmp.Diff([]netip.Addr{vipA}, r.bound(t), cmpAddrs); diff != "" {
			t.Errorf("switchyard0 after the failed delete (-want +got):\n%s", diff)
		}
		// A restarted daemon still owns the service through the address.
		r.kernel.SetError(ipvstest.OpDeleteService, nil)
		if err := r.dataplane(t).Apply(t.Context(), plugin.Update{Plan: &model.Plan{}, Full: true}); err != nil {
			t.Fatal(err)
		}
		got := crashState{Bound: r.bound(t)}
		for _, e := range r.kernel.Table() {
			got.Services = append(got.Services, e.Service.VirtualServiceKey)
		}
		if diff := cmp.Diff(crashState{}, got, cmpAddrs); diff != "" {
			t.Errorf("after the restart (-want +got):\n%s", diff)
		}
	})
}

// TestDataplaneCrashAfterTableRewrite: when the table was deleted behind
// the running daemon's back, the write that records a new NodePort
// carries the NodePorts it already owns too, so that a crash right after
// it loses none of them.
func TestDataplaneCrashAfterTableRewrite(t *testing.T) {
	r := newCrashRig(t)
	keyNP2 := model.VirtualServiceKey{Addr: nodeIP, Port: 30081, Protocol: model.TCP}
	one := onePlan(map[model.VirtualServiceKey]model.FrontendKind{keyNP: model.FrontendNodePort})
	two := onePlan(map[model.VirtualServiceKey]model.FrontendKind{keyNP: model.FrontendNodePort, keyNP2: model.FrontendNodePort})
	dp := r.dataplane(t)
	if err := dp.Apply(t.Context(), plugin.Update{Plan: one, Full: true}); err != nil {
		t.Fatal(err)
	}
	r.fw.DeleteTable()
	r.crash.After(ipvstest.OpFirewallSync, 1)
	if err := dp.Apply(t.Context(), plugin.Update{Plan: two, Full: true}); !errors.Is(err, ipvstest.ErrCrashed) {
		t.Fatalf("Apply = %v, want it to crash", err)
	}
	if diff := cmp.Diff([]model.VirtualServiceKey{keyNP, keyNP2}, r.state(t).Owned, cmpAddrs); diff != "" {
		t.Errorf("owned keys after the crash (-want +got):\n%s", diff)
	}
	r.crash.Restart()
	if err := r.dataplane(t).Apply(t.Context(), plugin.Update{Plan: &model.Plan{}, Full: true}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(crashState{Services: []model.VirtualServiceKey{keyForeignNP}}, r.state(t), cmpAddrs); diff != "" {
		t.Errorf("after the restart (-want +got):\n%s", diff)
	}
}
