package plugin_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/core/plugin/plugintest"
)

// TestCheckResult: every problem of a result is named, in one
// OutputError that is ErrPolicyInvalidOutput.
func TestCheckResult(t *testing.T) {
	ipvs := plugintest.NewSchedulers("rr", "wrr", "mh")
	big := uint32(plugin.MaxWeight + 1)
	for _, tc := range []struct {
		name       string
		res        plugin.PolicyResult
		n          int
		schedulers plugin.SchedulerSet
		want       []string
	}{
		{name: "valid", res: plugin.PolicyResult{Weights: []uint32{1, plugin.MaxWeight}, Scheduler: "mh", Flags: []string{"mh-port"}, Reevaluate: time.Second}, n: 2, schedulers: ipvs},
		{name: "no scheduler named, none supported", res: plugin.PolicyResult{Weights: []uint32{0}}, n: 1},
		{name: "every problem", res: plugin.PolicyResult{Weights: []uint32{big, 1, big}, Scheduler: "fastest", Reevaluate: -time.Millisecond}, n: 2, schedulers: ipvs, want: []string{
			"3 weights for 2 endpoints",
			"weight 2147483648 of endpoint 0 above 2147483647",
			"weight 2147483648 of endpoint 2 above 2147483647",
			`scheduler "fastest" is not one the dataplane supports`,
			"negative re-evaluation interval -1ms",
		}},
		{name: "many weights over", res: plugin.PolicyResult{Weights: []uint32{big, big, big, big, big, big}}, n: 6, want: []string{
			"weight 2147483648 of endpoint 0 above 2147483647",
			"weight 2147483648 of endpoint 1 above 2147483647",
			"weight 2147483648 of endpoint 2 above 2147483647",
			"weight 2147483648 of endpoint 3 above 2147483647",
			"2 more weights above 2147483647",
		}},
		{name: "flags without a scheduler", res: plugin.PolicyResult{Weights: []uint32{1}, Flags: []string{"sh-port"}}, n: 1, schedulers: ipvs,
			want: []string{"scheduler flags sh-port without a scheduler"}},
		{name: "a dataplane that names no scheduler", res: plugin.PolicyResult{Weights: []uint32{1}, Scheduler: "rr"}, n: 1,
			want: []string{`scheduler "rr" is not one the dataplane supports`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := plugin.CheckResult(tc.res, tc.n, tc.schedulers)
			var got []string
			if err != nil {
				var oe *plugin.OutputError
				if !errors.As(err, &oe) || !errors.Is(err, plugin.ErrPolicyInvalidOutput) {
					t.Fatalf("CheckResult() = %v, want an *OutputError that is ErrPolicyInvalidOutput", err)
				}
				got = oe.Problems
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}
