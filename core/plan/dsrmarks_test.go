package plan_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/plan"
)

// TestDSRMarksStable runs a sequence of node sets through one DSRMarks:
// a node keeps its mark while it stays, a joining node takes the lowest
// free mark, and none is renumbered by another joining or leaving.
func TestDSRMarksAssignStable(t *testing.T) {
	m := func(i int) uint32 { return plan.DSRMark(i) }
	var marks plan.DSRMarks
	for _, step := range []struct {
		nodes []string
		want  map[string]uint32
	}{
		{[]string{"n2", "n3"}, map[string]uint32{"n2": m(0), "n3": m(1)}},
		{[]string{"n1", "n2", "n3"}, map[string]uint32{"n1": m(2), "n2": m(0), "n3": m(1)}}, // sorts first, numbered last
		{[]string{"n1", "n3"}, map[string]uint32{"n1": m(2), "n3": m(1)}},
		{[]string{"n4", "n1", "n3", "n0", "n4"}, map[string]uint32{"n0": m(0), "n1": m(2), "n3": m(1), "n4": m(3)}},
		{nil, map[string]uint32{}},
		{[]string{"n4"}, map[string]uint32{"n4": m(0)}},
	} {
		got, err := marks.Assign(step.nodes)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(step.want, got); d != "" {
			t.Fatalf("Assign(%v) mismatch (-want +got):\n%s", step.nodes, d)
		}
	}
}

// TestDSRGivenMarks: with marks given, the plan's peers carry them and a
// node joining changes no other peer's mark nor any slot it did not own.
func TestDSRGivenMarks(t *testing.T) {
	var marks plan.DSRMarks
	withMarks := func(nodes []plan.DSRNode) []plan.DSRNode {
		var names []string
		for _, n := range nodes {
			names = append(names, n.Name)
		}
		got, err := marks.Assign(names)
		if err != nil {
			t.Fatal(err)
		}
		out := slices.Clone(nodes)
		for i := range out {
			out[i].Mark = got[out[i].Name]
		}
		return out
	}
	three := withMarks(dsrNodes[1:]) // n1, n2
	if _, err := plan.DSR(dsrInput("n3", append(slices.Clone(three), plan.DSRNode{Name: "n3", Addr: netip.MustParseAddr("10.0.3.2")}), "n1", "n2")); err == nil {
		t.Fatal("n3 without a mark among marked nodes: want an error")
	}
	before, err := plan.DSR(dsrInput("n1", three, "n1", "n2"))
	if err != nil {
		t.Fatal(err)
	}
	joined := withMarks(append(slices.Clone(dsrNodes[1:]), plan.DSRNode{Name: "n0", Addr: netip.MustParseAddr("10.0.0.2")}))
	after, err := plan.DSR(dsrInput("n1", joined, "n1", "n2"))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(before, after, cmpAddrs); d != "" {
		t.Errorf("a node holding no backend joined: plan changed (-before +after):\n%s", d)
	}
	if before.Peers[0].Mark != plan.DSRMark(1) {
		t.Errorf("n2's mark %#x, want the one Assign gave it, %#x", before.Peers[0].Mark, plan.DSRMark(1))
	}
	dup := slices.Clone(three)
	dup[1].Mark = dup[0].Mark
	if _, err := plan.DSR(dsrInput("n1", dup, "n1", "n2")); err == nil || !strings.Contains(err.Error(), "same mark") {
		t.Errorf("two nodes with one mark: error %v, want one saying %q", err, "same mark")
	}
}
