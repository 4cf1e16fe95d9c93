package ipvs_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/ipvs"
)

// kernelSchedulers are the schedulers of net/netfilter/ipvs/ip_vs_*.c,
// the list plan.ValidScheduler accepted before the dataplane named it.
var kernelSchedulers = []string{"rr", "wrr", "lc", "wlc", "lblc", "lblcr", "dh", "sh", "sed", "nq", "fo", "ovf", "mh", "twos"}

// TestSchedulers checks that the IPVS dataplane supports exactly the
// kernel's schedulers and moves only rr to wrr for unequal weights.
func TestSchedulers(t *testing.T) {
	if diff := cmp.Diff(kernelSchedulers, ipvs.Schedulers()); diff != "" {
		t.Errorf("Schedulers() (-want +got):\n%s", diff)
	}
	// A Dataplane's methods read no state; ipvs.SchedulerSet, for use
	// before one is opened, must answer as they do.
	for name, set := range map[string]plugin.SchedulerSet{"Dataplane": (*ipvs.Dataplane)(nil), "SchedulerSet": ipvs.SchedulerSet} {
		t.Run(name, func(t *testing.T) { testSchedulerSet(t, set) })
	}
}

func testSchedulerSet(t *testing.T, set plugin.SchedulerSet) {
	if diff := cmp.Diff(kernelSchedulers, set.Schedulers()); diff != "" {
		t.Errorf("Schedulers() (-want +got):\n%s", diff)
	}
	type answer struct {
		Supported bool
		Weighted  string
	}
	for _, tc := range []struct {
		name string
		want answer
	}{
		{"rr", answer{true, "wrr"}},
		{"wrr", answer{true, "wrr"}},
		{"wlc", answer{true, "wlc"}},
		{"mh", answer{true, "mh"}},
		{"twos", answer{true, "twos"}},
		{"", answer{false, ""}},
		{"RR", answer{false, "RR"}},
		{" rr", answer{false, " rr"}},
		{"random", answer{false, "random"}},
		{"maglev", answer{false, "maglev"}},
	} {
		got := answer{set.SupportsScheduler(tc.name), set.WeightedScheduler(tc.name)}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%q (-want +got):\n%s", tc.name, diff)
		}
		if got := (answer{ipvs.SupportsScheduler(tc.name), ipvs.WeightedScheduler(tc.name)}); got != tc.want {
			t.Errorf("package functions for %q = %+v, want %+v", tc.name, got, tc.want)
		}
	}
	for _, name := range kernelSchedulers {
		if !set.SupportsScheduler(name) {
			t.Errorf("SupportsScheduler(%q) = false, want true", name)
		}
	}
}
