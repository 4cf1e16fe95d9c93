//go:build linux

package labtest

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/ipvs/ipvstest"
)

// TestDataplaneCrashKeepsOwnership kills the daemon on the real kernel
// right after an Apply created a NodePort virtual service, and right after
// another deleted it: the table recorded the NodePort before it existed,
// so the restarted daemon deletes it when its plan no longer wants it, and
// drops the record of a deleted one without an error. A foreign service on
// the node address stays through it all.
func TestDataplaneCrashKeepsOwnership(t *testing.T) {
	requireGuest(t)
	clearPlan(t)
	deleteTable(t)
	node := netip.MustParseAddr("10.244.0.1")
	npKey := model.VirtualServiceKey{Addr: node, Port: 30092, Protocol: model.TCP}
	foreign := ipvs.Service{VirtualServiceKey: model.VirtualServiceKey{Addr: node, Port: 30098, Protocol: model.TCP}, Scheduler: "rr"}
	addForeignService(t, foreign)

	nodePort := clusterIP(node.String(), npKey.Port, model.TCP, "rr", backends(false, HTTPPort, -1, 1, -1))
	nodePort.Kind = model.FrontendNodePort
	web := clusterIP("10.96.3.60", 80, model.TCP, "rr", backends(false, HTTPPort, 1, -1, -1))
	without := planOf(map[string]model.VirtualService{"web": web})
	with := planOf(map[string]model.VirtualService{"web": web, "np": nodePort})

	crash := &ipvstest.Crash{}
	daemon := func(crashing bool) *labDataplane {
		return newLabDataplane(t, withFirewall(&countingFirewall{Firewall: ipvs.NewNFTables()}), func(c *ipvs.Config) {
			if crashing {
				c.Kernel, c.Addresses, c.Firewall = crash.Kernel(c.Kernel), crash.Addresses(c.Addresses), crash.Firewall(c.Firewall)
			}
		})
	}
	type state struct {
		NodePort, Foreign bool
		Owned             []model.VirtualServiceKey
	}
	observe := func() state {
		t.Helper()
		table, _ := kernelDump(t)
		_, np := findService(table, "TCP/10.244.0.1:30092 ")
		_, fo := findService(table, "TCP/10.244.0.1:30098 ")
		fw, err := ipvs.NewNFTables().Load()
		if err != nil {
			t.Fatalf("read the table: %v", err)
		}
		return state{NodePort: np, Foreign: fo, Owned: fw.Owned}
	}
	owned := []model.VirtualServiceKey{npKey}

	// A running daemon: its table exists.
	if err := daemon(false).Apply(t.Context(), plugin.Update{Plan: without, Full: true}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	steps := []struct {
		name       string
		plan       *model.Plan
		crashAfter ipvstest.Op // "": no crash
		want       state
	}{
		{name: "crash right after the NodePort's creation", plan: with, crashAfter: ipvstest.OpAddService,
			want: state{NodePort: true, Foreign: true, Owned: owned}},
		{name: "restart without the NodePort: deleted, record dropped", plan: without,
			want: state{Foreign: true}},
		{name: "the NodePort again", plan: with,
			want: state{NodePort: true, Foreign: true, Owned: owned}},
		{name: "crash right after the NodePort's deletion", plan: without, crashAfter: ipvstest.OpDeleteService,
			want: state{Foreign: true, Owned: owned}},
		{name: "restart: the stale record dropped", plan: without,
			want: state{Foreign: true}},
	}
	for _, st := range steps {
		crash.Restart()
		if st.crashAfter != "" {
			crash.After(st.crashAfter, 1)
		}
		err := daemon(st.crashAfter != "").Apply(t.Context(), plugin.Update{Plan: st.plan, Full: true})
		switch {
		case st.crashAfter == "" && err != nil:
			t.Fatalf("%s: %v", st.name, err)
		case st.crashAfter != "" && !errors.Is(err, ipvstest.ErrCrashed):
			t.Fatalf("%s: Apply returned %v, want it to crash", st.name, err)
		}
		got := observe()
		slices.SortFunc(got.Owned, model.VirtualServiceKey.Compare)
		if diff := cmp.Diff(st.want, got, cmpLab); diff != "" {
			t.Errorf("%s (-want +got):\n%s", st.name, diff)
		}
	}
}
