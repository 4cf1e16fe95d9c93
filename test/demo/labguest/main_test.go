package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/switchyard-lb/switchyard/ipvs"
)

func TestFlagNames(t *testing.T) {
	tests := []struct {
		sched string
		flags ipvs.Flags
		want  []string
	}{
		{sched: "rr", flags: 0, want: nil},
		{sched: "rr", flags: ipvs.FlagPersistent, want: nil},
		{sched: "mh", flags: ipvs.FlagSchedOpt2, want: []string{"mh-port"}},
		{sched: "mh", flags: ipvs.FlagSchedOpt1 | ipvs.FlagSchedOpt2, want: []string{"mh-fallback", "mh-port"}},
		{sched: "sh", flags: ipvs.FlagSchedOpt1, want: []string{"sh-fallback"}},
		{sched: "wrr", flags: ipvs.FlagSchedOpt3, want: []string{"flag-3"}},
	}
	for _, tc := range tests {
		if diff := cmp.Diff(tc.want, flagNames(tc.sched, tc.flags)); diff != "" {
			t.Errorf("flagNames(%s, %#x) (-want +got):\n%s", tc.sched, tc.flags, diff)
		}
	}
}
