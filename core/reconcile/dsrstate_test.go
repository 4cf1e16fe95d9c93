package reconcile_test

import (
	"context"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/switchyard-lb/switchyard/core/election"
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/model/modeltest"
	"github.com/switchyard-lb/switchyard/core/plan"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/core/plugin/plugintest"
	"github.com/switchyard-lb/switchyard/core/reconcile"
	"github.com/switchyard-lb/switchyard/ipvs/dryrun"
)

// dsrKernel is a dsrRecorder that outlives a loop, as the kernel
// outlives the daemon, and reads the peer marks back from the last plan
// applied, as ipvs.DSR.PeerMarks reads them from the kernel's services.
type dsrKernel struct{ dsrRecorder }

func (k *dsrKernel) PeerMarks() (map[netip.Addr]uint32, error) {
	p, _ := k.last()
	out := map[netip.Addr]uint32{}
	for _, peer := range p.Peers {
		out[peer.Addr] = peer.Mark
	}
	return out, nil
}

var _ reconcile.DSRMarksReader = (*dsrKernel)(nil)

// newDSRLoop is n3's loop over kernel, as started by the daemon.
func newDSRLoop(src *plugintest.Source, kernel *dsrKernel) *reconcile.Loop {
	return reconcile.New(reconcile.Config{
		NodeName: "n3", Source: src, Planner: plan.New(plan.Options{}), Dataplane: dryrun.New(),
		Elected: []plugin.ElectedAnnouncer{{Announcer: plugintest.NewAnnouncer("bgp"), Mode: election.BGP}},
		DSR: &reconcile.DSRConfig{
			Dataplane: kernel, Encapsulation: model.IPIP, Seed: 0x5eed, TableSize: 1009, LinkMTU: 1500,
		},
	})
}

// TestLoopDSRRestartKeepsMarks: n3 (no endpoint) forwards a dsr
// Service's flows to n1 and n2; n0 joins later and takes the next free
// mark. A fresh daemon would number the four nodes in name order and
// give n1 and n2 other marks than the kernel holds, rebuilding both
// peers' services (which drops a packet of every flow n3 forwards and
// may send a flow that opens no connection meanwhile to the wrong node);
// the restarted loop reads the kernel's marks back first (DSRMarksReader)
// and applies the same peers. /debug/state's dsr view shows the marks,
// the peers and n3's role and slots, the same before and after.
func TestLoopDSRRestartKeepsMarks(t *testing.T) {
	three := map[string]*model.Node{
		"n1": dsrClusterNode("n1", "10.0.1.2"),
		"n2": dsrClusterNode("n2", "10.0.2.2"),
		"n3": dsrClusterNode("n3", "10.0.3.2"),
	}
	svc := lbLocal(lbKey, "10.96.0.20", "192.0.2.7", modeltest.Ready("10.1.0.1", "n1"), modeltest.Ready("10.2.0.1", "n2"))
	svc.Service.ForwardingMode = model.ForwardingDSR
	kernel := &dsrKernel{}
	sync := func(l *reconcile.Loop, src *plugintest.Source, d model.Delta) {
		t.Helper()
		src.Push(d)
		if _, err := l.Sync(context.Background()); err != nil {
			t.Fatalf("Sync: %v", err)
		}
	}
	src := plugintest.NewSource()
	src.SetSynced(true)
	loop := newDSRLoop(src, kernel)
	sync(loop, src, model.Delta{Nodes: three, Services: map[model.ServiceKey]model.ServiceState{lbKey: svc}})
	sync(loop, src, model.Delta{Nodes: map[string]*model.Node{"n0": dsrClusterNode("n0", "10.0.0.2")}})
	before, _ := kernel.last()
	stateBefore := loop.State().DSR
	if stateBefore == nil || len(stateBefore.Frontends) != 1 {
		t.Fatalf("/debug/state's dsr view %+v: want one frontend", stateBefore)
	}
	f := stateBefore.Frontends[0]
	if f.Role != reconcile.DSRRoleIngress || f.TableSize != 1009 || f.Slots["n3"] != 0 || f.Slots["n1"]+f.Slots["n2"] != 1009 {
		t.Errorf("n3's view of the frontend %+v: want role %s, 1009 slots over n1 and n2", f, reconcile.DSRRoleIngress)
	}
	if len(stateBefore.Marks) != 4 || len(stateBefore.Peers) != 2 {
		t.Errorf("view: marks %v, peers %+v: want the four nodes' marks and peers n1, n2", stateBefore.Marks, stateBefore.Peers)
	}

	// The restart: a new loop (a new process) over the same kernel, with
	// all four nodes listed at once.
	src = plugintest.NewSource()
	src.SetSynced(true)
	restarted := newDSRLoop(src, kernel)
	four := map[string]*model.Node{"n0": dsrClusterNode("n0", "10.0.0.2")}
	for k, v := range three {
		four[k] = v
	}
	sync(restarted, src, model.Delta{Nodes: four, Services: map[model.ServiceKey]model.ServiceState{lbKey: svc}})
	after, _ := kernel.last()
	addrs := cmpopts.EquateComparable(netip.Addr{}, netip.AddrPort{})
	if d := cmp.Diff(before.Peers, after.Peers, addrs); d != "" {
		t.Errorf("the restarted daemon's peers differ from the kernel's (-before +after):\n%s", d)
	}
	if d := cmp.Diff(before.Frontends, after.Frontends, addrs); d != "" {
		t.Errorf("the restarted daemon's table differs (-before +after):\n%s", d)
	}
	if d := cmp.Diff(stateBefore.Frontends, restarted.State().DSR.Frontends, addrs); d != "" {
		t.Errorf("/debug/state's dsr frontends differ across the restart (-before +after):\n%s", d)
	}

	// The view on a backend node: n1 serves its own slots.
	n1 := newDSRNode("n1")
	n1.sync(t, model.Delta{Nodes: three, Services: map[model.ServiceKey]model.ServiceState{lbKey: svc}})
	v := n1.loop.State().DSR
	if v == nil || len(v.Frontends) != 1 || v.Frontends[0].Role != reconcile.DSRRoleBackend || v.Frontends[0].Slots["n1"] == 0 {
		t.Errorf("n1's view %+v: want role %s with slots of its own", v, reconcile.DSRRoleBackend)
	}
}
