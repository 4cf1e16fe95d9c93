package ipvs_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/ipvs/ipvstest"
)

// A dump interrupted by concurrent changes returns partial results; the
// dataplane must read again instead of acting on them or failing.
func TestDataplaneRetriesInterruptedDumps(t *testing.T) {
	r := newRig()
	plan := webPlan(be("10.244.1.2", 8080, 1), be("10.244.2.2", 8080, 2))
	if err := r.dataplane(t).Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	want := r.kernel.Table()

	// A restarted dataplane reads everything; each dump is interrupted
	// once. Acting on the partial results would re-create what is there
	// (and fail with ErrExists).
	r.addrs.Interrupt(1)
	r.kernel.Interrupt(ipvstest.OpServices, 1)
	r.kernel.Interrupt(ipvstest.OpDestinations, 1)
	services, mutations := r.kernel.Calls(ipvstest.OpServices), r.mutations()
	dp := r.dataplane(t)
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatalf("Apply with interrupted dumps: %v", err)
	}
	if n := r.mutations() - mutations; n != 0 {
		t.Errorf("Apply with interrupted dumps made %d kernel changes, want 0", n)
	}
	if n := r.kernel.Calls(ipvstest.OpServices) - services; n != 2 {
		t.Errorf("Services called %d times, want 2 (one interrupted)", n)
	}
	if diff := cmp.Diff(want, r.kernel.Table(), cmpAddrs); diff != "" {
		t.Errorf("kernel table (-want +got):\n%s", diff)
	}

	// A dump interrupted on every attempt fails the Apply, and nothing
	// is pruned on its partial results: the empty plan deletes nothing.
	r.kernel.Interrupt(ipvstest.OpServices, 1000)
	err := r.dataplane(t).Apply(t.Context(), plugin.Update{Plan: &model.Plan{}, Full: true})
	if !errors.Is(err, ipvs.ErrInterrupted) {
		t.Fatalf("Apply with a dump interrupted every time = %v, want ErrInterrupted", err)
	}
	if diff := cmp.Diff(want, r.kernel.Table(), cmpAddrs); diff != "" {
		t.Errorf("kernel table after a failed load (-want +got):\n%s", diff)
	}
	r.kernel.Interrupt(ipvstest.OpServices, 0)

	// An interrupted conntrack deletion is asked again.
	before := len(r.ct.Deletions())
	r.ct.Interrupt(1)
	if err := dp.Apply(t.Context(), plugin.Update{Plan: &model.Plan{}, Full: true}); err != nil {
		t.Fatalf("Apply empty plan: %v", err)
	}
	wantCT := []ipvstest.ConntrackDeletion{{VIP: vipA, Port: 53}, {VIP: vipA, Port: 53}}
	if diff := cmp.Diff(wantCT, r.ct.Deletions()[before:], cmpAddrs); diff != "" {
		t.Errorf("conntrack deletions (-want +got):\n%s", diff)
	}
}
