package metrics_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/switchyard-lb/switchyard/core/metrics"
)

func TestNewRegistersPrefixedMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := metrics.New(reg)
	m.AnnouncedIPs.WithLabelValues("arp").Set(2)
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
		if !strings.HasPrefix(f.GetName(), "switchyard_") {
			t.Errorf("metric %s lacks the switchyard_ prefix", f.GetName())
		}
	}
	want := []string{
		"switchyard_announced_ips",
		"switchyard_healthcheck_ports",
		"switchyard_network_programming_duration_seconds",
		"switchyard_real_servers_programmed",
		"switchyard_services_programmed",
		"switchyard_sync_duration_seconds",
		"switchyard_sync_errors_total",
		"switchyard_sync_last_timestamp_seconds",
		"switchyard_syncs_total",
		"switchyard_virtual_services_programmed",
	}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("registered metrics (-want +got):\n%s", diff)
	}
	if n := testutil.CollectAndCount(m.SyncErrors); n != 3 {
		t.Errorf("sync_errors_total exports %d stages before any error, want 3", n)
	}
}

func TestNewTwiceOnOneRegistryPanics(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics.New(reg)
	defer func() {
		if recover() == nil {
			t.Error("second New on the same registry did not panic")
		}
	}()
	metrics.New(reg)
}

func TestNetworkProgrammingBucketsMatchKubeProxy(t *testing.T) {
	b := metrics.NetworkProgrammingBuckets()
	if len(b) != 80 {
		t.Fatalf("%d buckets, want 80", len(b))
	}
	for _, c := range []struct {
		i    int
		want float64
	}{{0, 0.25}, {1, 0.5}, {2, 1}, {60, 59}, {61, 60}, {72, 115}, {73, 120}, {79, 300}} {
		if b[c.i] != c.want {
			t.Errorf("bucket %d = %v, want %v", c.i, b[c.i], c.want)
		}
	}
}

func TestObserveProgramming(t *testing.T) {
	m := metrics.New(nil)
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	m.ObserveProgramming(now, []time.Time{
		now.Add(-1500 * time.Millisecond),
		{},                         // no annotation: skipped
		now.Add(2 * time.Second),   // skew: counts as 0
		now.Add(-90 * time.Second), // slow
	})
	want := `
# HELP switchyard_network_programming_duration_seconds Time from an EndpointSlice change (its endpoints.kubernetes.io/last-change-trigger-time) to the dataplane applying it.
# TYPE switchyard_network_programming_duration_seconds histogram
`
	var sb strings.Builder
	sb.WriteString(want)
	// Only the cumulative counts at a few bounds matter; build them all.
	for _, le := range metrics.NetworkProgrammingBuckets() {
		n := 0
		for _, v := range []float64{1.5, 0, 90} {
			if v <= le {
				n++
			}
		}
		sb.WriteString("switchyard_network_programming_duration_seconds_bucket{le=\"" + fmtFloat(le) + "\"} " + fmtFloat(float64(n)) + "\n")
	}
	sb.WriteString("switchyard_network_programming_duration_seconds_bucket{le=\"+Inf\"} 3\n")
	sb.WriteString("switchyard_network_programming_duration_seconds_sum 91.5\n")
	sb.WriteString("switchyard_network_programming_duration_seconds_count 3\n")
	if err := testutil.CollectAndCompare(m.NetworkProgrammingDuration, strings.NewReader(sb.String())); err != nil {
		t.Error(err)
	}
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
