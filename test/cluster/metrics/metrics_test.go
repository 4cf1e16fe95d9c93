package metrics

import (
	"bytes"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestMetricsAwk: make bench-cluster's summary (metrics.awk) gives each
// measurement's runs, median, max and bound, and fails when a median is
// over the bound a suite logged (a failover claim with its margin).
func TestMetricsAwk(t *testing.T) {
	awk, err := exec.LookPath("awk")
	if err != nil {
		t.Skip("no awk:", err)
	}
	header := "  metric                        runs     median        max      bound  values\n"
	for _, tc := range []struct {
		name, in, want string
		fails          bool
	}{
		{
			name: "under the bound",
			in: "guest: kill.go:1: cluster-bound l2-failover-kill-ms=3300 (the claim)\n" +
				"guest: cluster-metric l2-failover-kill-ms=1200\ncluster-metric l2-failover-kill-ms=2900\n" +
				"cluster-metric l2-failover-kill-ms=1500\ncluster-metric bgp-ecmp-ms=4700\n",
			want: header +
				"  l2-failover-kill-ms              3       1500       2900       3300  1200 2900 1500\n" +
				"  bgp-ecmp-ms                      1       4700       4700          -  4700\n",
		},
		{
			name: "a median over its bound, the tightest of the runs'",
			in: "cluster-bound l2-failover-kill-ms=3300\ncluster-bound l2-failover-kill-ms=3000\n" +
				"cluster-metric l2-failover-kill-ms=3100\ncluster-metric l2-failover-kill-ms=3200\n",
			want: header +
				"  l2-failover-kill-ms              2       3150       3200       3000  3100 3200\n" +
				"  l2-failover-kill-ms: median 3150 over its bound 3000 (the claim with its margin)\n",
			fails: true,
		},
		{name: "nothing measured", in: "cluster-bound a=1\n", want: "  no cluster-metric lines\n", fails: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(awk, "-f", "metrics.awk")
			cmd.Stdin = strings.NewReader(tc.in)
			var out bytes.Buffer
			cmd.Stdout = &out
			err := cmd.Run()
			var exit *exec.ExitError
			if failed := errors.As(err, &exit); failed != tc.fails || (err != nil && !failed) {
				t.Errorf("awk: %v, want it to fail: %v", err, tc.fails)
			}
			if diff := cmp.Diff(tc.want, out.String()); diff != "" {
				t.Errorf("summary (-want +got):\n%s", diff)
			}
		})
	}
}
