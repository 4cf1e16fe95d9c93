package reconcile_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchyard-lb/switchyard/core/election"
	"github.com/switchyard-lb/switchyard/core/healthcheck"
	"github.com/switchyard-lb/switchyard/core/metrics"
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/model/modeltest"
	"github.com/switchyard-lb/switchyard/core/plan"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/core/plugin/plugintest"
	"github.com/switchyard-lb/switchyard/core/reconcile"
	"github.com/switchyard-lb/switchyard/ipvs/dryrun"
)

var (
	t0     = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	webKey = model.ServiceKey{Namespace: "default", Name: "web"}
	lbKey  = model.ServiceKey{Namespace: "default", Name: "lb"}
	apiKey = model.ServiceKey{Namespace: "prod", Name: "api"}
	nodeA  = &model.Node{Name: "node-a", Addresses: []netip.Addr{netip.MustParseAddr("192.168.1.10")}, Ready: true}
)

// lbLocal is a LoadBalancer Service with externalTrafficPolicy Local.
func lbLocal(key model.ServiceKey, vip, ingress string, eps ...model.Endpoint) model.ServiceState {
	return model.ServiceState{
		Service: &model.Service{Key: key, Type: model.LoadBalancer, ClusterIPs: []netip.Addr{modeltest.Addr(vip)},
			LoadBalancerIPs:       []netip.Addr{modeltest.Addr(ingress)},
			Ports:                 []model.ServicePort{{Name: "http", Protocol: model.TCP, Port: 80, NodePort: 30080}},
			ExternalTrafficPolicy: model.PolicyLocal, HealthCheckNodePort: 32000},
		Endpoints: eps,
	}
}

func deleted() model.ServiceState { return model.ServiceState{} }

func delta(trigger time.Duration, svcs map[model.ServiceKey]model.ServiceState) *model.Delta {
	d := &model.Delta{Services: svcs}
	if trigger != 0 {
		d.TriggerTimes = []time.Time{t0.Add(-trigger)}
	}
	return d
}

type harness struct {
	src  *plugintest.Source
	dry  *dryrun.Dataplane
	dp   *plugintest.Dataplane // dry, failing on request
	ann  *plugintest.Announcer
	hc   *healthcheck.Server
	m    *metrics.Metrics
	loop *reconcile.Loop
}

// newHarness builds a loop over the real planner, the dry-run dataplane, a
// recording announcer and real health check servers on loopback. It checks
// the ordering rule all along: whenever the announcer is called and after
// every Apply, every announced address is served by the dataplane.
func newHarness(t *testing.T) *harness {
	h := &harness{
		src: plugintest.NewSource(),
		dry: dryrun.New(),
		ann: plugintest.NewAnnouncer("arp"),
		hc: healthcheck.NewServer(nil, nil, healthcheck.WithListen(func(network, _ string) (net.Listener, error) {
			return net.Listen(network, "127.0.0.1:0")
		})),
		m: metrics.New(nil),
	}
	h.dp = plugintest.WrapDataplane(h.dry)
	t.Cleanup(func() { h.hc.Close() })
	served := func(when string, set []model.Announcement) {
		for _, a := range set {
			if !h.dry.Serves(a.Addr) {
				t.Errorf("%s: %s is announced but not served by the dataplane", when, a.Addr)
			}
		}
	}
	h.ann.OnAnnounce(func(set []model.Announcement) { served("announce", set) })
	h.dp.AfterApply(func(plugin.Update) { served("after apply", h.ann.Current()) })
	h.loop = reconcile.New(reconcile.Config{
		NodeName:  "node-a",
		Source:    h.src,
		Planner:   plan.New(plan.Options{}),
		Dataplane: h.dp,
		// A BGP announcer: every eligible node announces (node-a is).
		Elected: []plugin.ElectedAnnouncer{{Announcer: h.ann, Mode: election.BGP}},
		Metrics: h.m,
		Health:  h.hc,
		Now:     func() time.Time { return t0 },
	})
	return h
}

// table renders the dataplane with runs of spaces collapsed.
func table(dp *dryrun.Dataplane) []string {
	lines := strings.Split(strings.TrimSpace(dp.String()), "\n")[3:] // skip the 3 title lines
	for i, l := range lines {
		lines[i] = strings.Join(strings.Fields(l), " ")
	}
	return lines
}

func announced(addr string, key model.ServiceKey) model.Announcement {
	return model.Announcement{Addr: modeltest.Addr(addr), Service: key}
}

type step struct {
	name     string
	unsynced bool
	push     *model.Delta
	failNext error // the dataplane fails the next Apply
	wantErr  string
	table    []string
	// announce is the announcer's set after the step; calls the sets it
	// received during the step.
	announce []model.Announcement
	calls    [][]model.Announcement
	health   map[model.ServiceKey]healthcheck.Port
	stats    dryrun.Stats
	// latency is the number of network programming latencies observed.
	latency int
}

var (
	webTable = []string{
		"TCP 10.96.0.1:80 rr",
		"-> 10.244.1.2:8080 Masq 1 0 0",
		"-> 10.244.2.2:8080 Masq 1 0 0",
	}
	webTable3 = []string{
		"TCP 10.96.0.1:80 rr",
		"-> 10.244.1.2:8080 Masq 1 0 0",
		"-> 10.244.2.2:8080 Masq 1 0 0",
		"-> 10.244.3.2:8080 Masq 1 0 0",
	}
	lbTable = func(ingress string) []string {
		return []string{
			"TCP 10.96.0.20:80 rr",
			"-> 10.244.1.5:8080 Masq 1 0 0",
			"-> 10.244.2.5:8080 Masq 1 0 0",
			"TCP 192.168.1.10:30080 rr",
			"-> 10.244.1.5:8080 Masq 1 0 0",
			"TCP " + ingress + ":80 rr",
			"-> 10.244.1.5:8080 Masq 1 0 0",
		}
	}
	// The local endpoint of lb is terminating: the cluster-wide frontend
	// drops it, the local ones keep it (no ready local endpoint exists).
	lbTerminatingTable = []string{
		"TCP 10.96.0.20:80 rr",
		"-> 10.244.2.5:8080 Masq 1 0 0",
		"TCP 192.168.1.10:30080 rr",
		"-> 10.244.1.5:8080 Masq 1 0 0",
		"TCP 203.0.113.11:80 rr",
		"-> 10.244.1.5:8080 Masq 1 0 0",
	}
	cat = func(parts ...[]string) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	lbEndpoints  = []model.Endpoint{modeltest.Ready("10.244.1.5", "node-a"), modeltest.Ready("10.244.2.5", "node-b")}
	webEndpoints = []model.Endpoint{modeltest.Ready("10.244.1.2", "node-a"), modeltest.Ready("10.244.2.2", "node-b")}
)

func TestLoopScenario(t *testing.T) {
	hc := func(n int) map[model.ServiceKey]healthcheck.Port {
		return map[model.ServiceKey]healthcheck.Port{lbKey: {Port: 32000, LocalEndpoints: n}}
	}
	steps := []step{
		{
			name:     "nothing happens before the source has synced",
			unsynced: true,
			push: &model.Delta{
				Nodes: map[string]*model.Node{"node-a": nodeA, "node-b": {Name: "node-b"}},
				Services: map[model.ServiceKey]model.ServiceState{
					webKey: modeltest.State(modeltest.ClusterIP(webKey, "10.96.0.1"), webEndpoints...),
					lbKey:  lbLocal(lbKey, "10.96.0.20", "203.0.113.10", lbEndpoints...),
				},
				TriggerTimes: []time.Time{t0.Add(-2 * time.Second)},
			},
			health: map[model.ServiceKey]healthcheck.Port{},
		},
		{
			name:     "first sync is full, then announces and opens health checks",
			table:    cat(webTable, lbTable("203.0.113.10")),
			announce: []model.Announcement{announced("203.0.113.10", lbKey)},
			calls:    [][]model.Announcement{{announced("203.0.113.10", lbKey)}},
			health:   hc(1),
			stats:    dryrun.Stats{Applies: 1, FullApplies: 1},
			latency:  1,
		},
		{
			name: "endpoint added: only the changed Service is applied",
			push: delta(time.Second, map[model.ServiceKey]model.ServiceState{
				webKey: modeltest.State(modeltest.ClusterIP(webKey, "10.96.0.1"), append(webEndpoints, modeltest.Ready("10.244.3.2", "node-c"))...),
			}),
			table:    cat(webTable3, lbTable("203.0.113.10")),
			announce: []model.Announcement{announced("203.0.113.10", lbKey)},
			health:   hc(1),
			stats:    dryrun.Stats{Applies: 2, FullApplies: 1, LastChanged: []model.ServiceKey{webKey}},
			latency:  2,
		},
		{
			name: "ingress IP changes: the old one is withdrawn before Apply, the new one announced after",
			push: delta(0, map[model.ServiceKey]model.ServiceState{
				lbKey: lbLocal(lbKey, "10.96.0.20", "203.0.113.11", lbEndpoints...),
			}),
			table:    cat(webTable3, lbTable("203.0.113.11")),
			announce: []model.Announcement{announced("203.0.113.11", lbKey)},
			calls:    [][]model.Announcement{{}, {announced("203.0.113.11", lbKey)}},
			health:   hc(1),
			stats:    dryrun.Stats{Applies: 3, FullApplies: 1, LastChanged: []model.ServiceKey{lbKey}},
			latency:  2,
		},
		{
			name: "the local endpoint terminates: health check reports 0, local frontends keep it",
			push: delta(time.Second, map[model.ServiceKey]model.ServiceState{
				lbKey: lbLocal(lbKey, "10.96.0.20", "203.0.113.11", modeltest.Terminating("10.244.1.5", "node-a"), modeltest.Ready("10.244.2.5", "node-b")),
			}),
			table: cat(webTable3, lbTerminatingTable),
			// externalTrafficPolicy Local without a ready local endpoint:
			// node-a is no longer eligible, and withdraws.
			announce: []model.Announcement{},
			calls:    [][]model.Announcement{{}},
			health:   hc(0),
			stats:    dryrun.Stats{Applies: 4, FullApplies: 1, LastChanged: []model.ServiceKey{lbKey}},
			latency:  3,
		},
		{
			name:     "a sync without changes applies nothing (full resyncs follow FullSyncPeriod)",
			table:    cat(webTable3, lbTerminatingTable),
			announce: []model.Announcement{},
			health:   hc(0),
			stats:    dryrun.Stats{Applies: 4, FullApplies: 1, LastChanged: []model.ServiceKey{lbKey}},
			latency:  3,
		},
		{
			name: "the local endpoint is ready again: announced after Apply",
			push: delta(0, map[model.ServiceKey]model.ServiceState{
				lbKey: lbLocal(lbKey, "10.96.0.20", "203.0.113.11", lbEndpoints...),
			}),
			table:    cat(webTable3, lbTable("203.0.113.11")),
			announce: []model.Announcement{announced("203.0.113.11", lbKey)},
			calls:    [][]model.Announcement{{announced("203.0.113.11", lbKey)}},
			health:   hc(1),
			stats:    dryrun.Stats{Applies: 5, FullApplies: 1, LastChanged: []model.ServiceKey{lbKey}},
			latency:  3,
		},
		{
			name:     "Service deleted: withdrawn before its virtual services go",
			push:     delta(0, map[model.ServiceKey]model.ServiceState{lbKey: deleted()}),
			table:    webTable3,
			announce: []model.Announcement{},
			calls:    [][]model.Announcement{{}},
			health:   map[model.ServiceKey]healthcheck.Port{},
			stats:    dryrun.Stats{Applies: 6, FullApplies: 1, LastChanged: []model.ServiceKey{lbKey}},
			latency:  3,
		},
		{
			name:     "the dataplane fails: the error is returned and nothing counts as applied",
			push:     delta(time.Second, map[model.ServiceKey]model.ServiceState{webKey: modeltest.State(modeltest.ClusterIP(webKey, "10.96.0.1"), webEndpoints[0])}),
			failNext: errors.New("netlink: device busy"),
			wantErr:  "dataplane dryrun: netlink: device busy",
			table:    webTable3,
			announce: []model.Announcement{},
			health:   map[model.ServiceKey]healthcheck.Port{},
			stats:    dryrun.Stats{Applies: 6, FullApplies: 1, LastChanged: []model.ServiceKey{lbKey}},
			latency:  3,
		},
		{
			name: "the next sync is full, so it repairs what the failed one missed",
			push: delta(0, map[model.ServiceKey]model.ServiceState{apiKey: modeltest.State(modeltest.ClusterIP(apiKey, "10.96.0.30"), modeltest.Ready("10.244.4.4", "node-d"))}),
			table: []string{
				"TCP 10.96.0.1:80 rr",
				"-> 10.244.1.2:8080 Masq 1 0 0",
				"TCP 10.96.0.30:80 rr",
				"-> 10.244.4.4:8080 Masq 1 0 0",
			},
			announce: []model.Announcement{},
			health:   map[model.ServiceKey]healthcheck.Port{},
			stats:    dryrun.Stats{Applies: 7, FullApplies: 2},
			latency:  4,
		},
	}

	h := newHarness(t)
	for _, st := range steps {
		h.src.SetSynced(!st.unsynced)
		if st.push != nil {
			h.src.Push(*st.push)
		}
		if st.failNext != nil {
			h.dp.FailNext(st.failNext)
		}
		before := len(h.ann.Calls())
		_, err := h.loop.Sync(context.Background())
		if got := errString(err); got != st.wantErr {
			t.Fatalf("%s: Sync error %q, want %q", st.name, got, st.wantErr)
		}
		if diff := cmp.Diff(st.table, table(h.dry), cmpOpts...); diff != "" {
			t.Errorf("%s: dataplane (-want +got):\n%s", st.name, diff)
		}
		if diff := cmp.Diff(st.announce, h.ann.Current(), cmpOpts...); diff != "" {
			t.Errorf("%s: announced (-want +got):\n%s", st.name, diff)
		}
		if diff := cmp.Diff(st.calls, h.ann.Calls()[before:], cmpOpts...); diff != "" {
			t.Errorf("%s: announcer calls (-want +got):\n%s", st.name, diff)
		}
		if diff := cmp.Diff(st.health, h.hc.Ports()); diff != "" {
			t.Errorf("%s: health checks (-want +got):\n%s", st.name, diff)
		}
		if diff := cmp.Diff(st.stats, h.dry.Stats(), cmpOpts...); diff != "" {
			t.Errorf("%s: dataplane stats (-want +got):\n%s", st.name, diff)
		}
		if got := histogramCount(t, h.m); got != st.latency {
			t.Errorf("%s: %d network programming latencies observed, want %d", st.name, got, st.latency)
		}
	}

	// The metrics agree with what was applied.
	for name, c := range map[string]struct {
		got  float64
		want float64
	}{
		"services_programmed":          {testutil.ToFloat64(h.m.ServicesProgrammed), 2},
		"virtual_services_programmed":  {testutil.ToFloat64(h.m.VirtualServicesProgrammed), 2},
		"real_servers_programmed":      {testutil.ToFloat64(h.m.RealServersProgrammed), 2},
		"sync_errors_total{dataplane}": {testutil.ToFloat64(h.m.SyncErrors.WithLabelValues(metrics.StageDataplane)), 1},
		"syncs_total{full}":            {testutil.ToFloat64(h.m.Syncs.WithLabelValues(metrics.ModeFull)), 2},
		"syncs_total{partial}":         {testutil.ToFloat64(h.m.Syncs.WithLabelValues(metrics.ModePartial)), 7}, // every step but the unsynced and the two full ones
		"announced_ips{arp}":           {testutil.ToFloat64(h.m.AnnouncedIPs.WithLabelValues("arp")), 0},
		"healthcheck_ports":            {testutil.ToFloat64(h.m.HealthCheckPorts), 0},
		"sync_last_timestamp_seconds":  {testutil.ToFloat64(h.m.LastSyncTimestamp), float64(t0.Unix())},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", name, c.got, c.want)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

var cmpOpts = []cmp.Option{cmpopts.EquateEmpty(), cmpopts.EquateComparable(netip.Addr{}, netip.AddrPort{}, netip.Prefix{})}

func histogramCount(t *testing.T, m *metrics.Metrics) int {
	t.Helper()
	var pm dto.Metric
	if err := m.NetworkProgrammingDuration.Write(&pm); err != nil {
		t.Fatal(err)
	}
	return int(pm.GetHistogram().GetSampleCount())
}
