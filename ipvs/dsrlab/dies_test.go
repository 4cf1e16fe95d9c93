//go:build linux

package dsrlab

import (
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/switchyard-lb/switchyard/core/model"
)

// TestDSRBackendNodeDies: TCP flows through n1, n2 and n3; then n2, a
// backend node (one pod), dies: its link goes down, the router's route
// leaves it, and the remaining nodes replan without it (as membership
// would declare it dead), keeping their peer marks. Its slots move to
// n1: every flow on n1's pods must go on, every flow on n2's pod must
// break (its state died with n2) and nothing else, and new flows must all
// be served by n1's pods.
func TestDSRBackendNodeDies(t *testing.T) {
	requireGuest(t)
	tp := newTopology(t)
	tp.programDSR(t, model.IPIP)
	n1, n2, n3 := tp.nodes[0], tp.nodes[1], tp.nodes[2]
	tp.setECMP(t, n1, n2, n3)
	flows := tp.dialFlows(t, 60)
	if ok, _, failures := round(t, flows, 100); ok != len(flows) {
		t.Fatalf("before n2 dies %d of %d answered: %v", ok, len(flows), failures)
	}
	onN2 := map[int]bool{}
	for _, f := range flows {
		if strings.HasSuffix(f.pod, "-n2") {
			onN2[f.port] = true
		}
	}
	if len(onN2) == 0 || len(onN2) == len(flows) {
		t.Fatalf("%d of %d flows on n2's pod: the test needs some on each node", len(onN2), len(flows))
	}

	withNetlink(t, tp.router, func(h *netlink.Handle) error {
		l, err := h.LinkByName(n2.routerSide)
		if err != nil {
			return err
		}
		return h.LinkSetDown(l)
	})
	tp.setECMP(t, n1, n3)
	peerMarks := map[string]uint32{"n1": n3.marks["n1"], "n3": n1.marks["n3"]}
	tp.planDSR(t, model.IPIP, []*node{n1, n3})
	if n3.marks["n1"] != peerMarks["n1"] || n1.marks["n3"] != peerMarks["n3"] {
		t.Errorf("peer marks changed when n2 left: n3 gives n1 %#x (was %#x), n1 gives n3 %#x (was %#x)",
			n3.marks["n1"], peerMarks["n1"], n1.marks["n3"], peerMarks["n3"])
	}

	ok, perPod, failures := round(t, flows, 100)
	broken := map[int]bool{}
	for _, f := range flows {
		if f.failed {
			broken[f.port] = true
		}
	}
	t.Logf("dsr-backend-node-dies flows=%d on-n2=%d kept=%d broken=%d per-pod=%v", len(flows), len(onN2), ok, len(broken), perPod)
	for _, f := range flows {
		switch {
		case onN2[f.port] && !broken[f.port]:
			t.Errorf("port %d: its pod's node died, yet the flow answered", f.port)
		case !onN2[f.port] && broken[f.port]:
			t.Errorf("port %d: on n1, broken when n2 died", f.port)
		}
	}
	if len(failures) > 3 {
		failures = failures[:3]
	}
	for _, f := range failures {
		t.Log(f) // what a broken flow looks like
	}
	fresh := tp.dialFlows(t, 20)
	ok, perPod, failures = round(t, fresh, 100)
	t.Logf("dsr-backend-node-dies new-flows=%d answered=%d per-pod=%v", len(fresh), ok, perPod)
	for _, f := range failures {
		t.Errorf("new flow after n2 died: %s", f)
	}
	for pod := range perPod {
		if strings.HasSuffix(pod, "-n2") {
			t.Errorf("a new flow was answered by %s, on the dead node", pod)
		}
	}
}
