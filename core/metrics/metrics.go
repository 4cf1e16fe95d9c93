package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Namespace prefixes every metric name.
const Namespace = "switchyard"

// Values of the stage label of SyncErrors.
const (
	StageDataplane   = "dataplane"
	StageAnnounce    = "announce"
	StageHealthCheck = "healthcheck"
)

// Values of the mode label of Syncs.
const (
	ModeFull    = "full"
	ModePartial = "partial"
)

// Metrics are the control loop's metrics.
type Metrics struct {
	// SyncDuration observes how long each sync takes (kube-proxy's
	// sync_proxy_rules_duration_seconds).
	SyncDuration prometheus.Histogram
	// NetworkProgrammingDuration observes, for each EndpointSlice change,
	// the time from its last-change-trigger-time annotation to the moment
	// the dataplane applied it (kube-proxy's
	// network_programming_duration_seconds).
	NetworkProgrammingDuration prometheus.Histogram
	// LastSyncTimestamp is the Unix time of the last successful sync
	// (kube-proxy's sync_proxy_rules_last_timestamp_seconds).
	LastSyncTimestamp prometheus.Gauge
	// Syncs counts syncs by mode (full or partial).
	Syncs *prometheus.CounterVec
	// SyncErrors counts failed syncs by the stage that failed.
	SyncErrors *prometheus.CounterVec
	// ServicesProgrammed is the number of Kubernetes Services with at
	// least one virtual service applied; VirtualServicesProgrammed and
	// RealServersProgrammed count the IPVS virtual services and real
	// servers applied.
	ServicesProgrammed        prometheus.Gauge
	VirtualServicesProgrammed prometheus.Gauge
	RealServersProgrammed     prometheus.Gauge
	// AnnouncedIPs is the number of addresses each announcer announces.
	AnnouncedIPs *prometheus.GaugeVec
	// HealthCheckPorts is the number of healthCheckNodePort servers open.
	HealthCheckPorts prometheus.Gauge
}

// NetworkProgrammingBuckets are kube-proxy's buckets for network
// programming latency: 0.25s and 0.5s, every second up to a minute, every
// 5s up to two minutes, every 30s up to five minutes.
func NetworkProgrammingBuckets() []float64 {
	b := prometheus.LinearBuckets(0.25, 0.25, 2)
	b = append(b, prometheus.LinearBuckets(1, 1, 59)...)
	b = append(b, prometheus.LinearBuckets(60, 5, 12)...)
	return append(b, prometheus.LinearBuckets(120, 30, 7)...)
}

// New builds the metrics and registers them on reg (MustRegister: it
// panics when reg already holds them). A nil reg leaves them unregistered,
// for tests and tools.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		SyncDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "sync_duration_seconds",
			Help:    "Time a reconcile sync took, from taking the changes to the last plugin call.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}),
		NetworkProgrammingDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "network_programming_duration_seconds",
			Help:    "Time from an EndpointSlice change (its endpoints.kubernetes.io/last-change-trigger-time) to the dataplane applying it.",
			Buckets: NetworkProgrammingBuckets(),
		}),
		LastSyncTimestamp: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "sync_last_timestamp_seconds",
			Help: "Unix time of the last successful reconcile sync.",
		}),
		Syncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "syncs_total",
			Help: "Reconcile syncs, by mode: full (the dataplane reconciles everything) or partial (changed Services only).",
		}, []string{"mode"}),
		SyncErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "sync_errors_total",
			Help: "Reconcile syncs that failed, by the stage that failed: dataplane, announce or healthcheck.",
		}, []string{"stage"}),
		ServicesProgrammed: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "services_programmed",
			Help: "Kubernetes Services with at least one virtual service applied to the dataplane.",
		}),
		VirtualServicesProgrammed: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "virtual_services_programmed",
			Help: "IPVS virtual services applied to the dataplane.",
		}),
		RealServersProgrammed: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "real_servers_programmed",
			Help: "IPVS real servers (destinations) applied to the dataplane, summed over virtual services.",
		}),
		AnnouncedIPs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "announced_ips",
			Help: "Addresses this node announces, by announcer.",
		}, []string{"announcer"}),
		HealthCheckPorts: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "healthcheck_ports",
			Help: "healthCheckNodePort servers this node has open.",
		}),
	}
	// Export the label values before the first error or sync.
	for _, s := range []string{StageDataplane, StageAnnounce, StageHealthCheck} {
		m.SyncErrors.WithLabelValues(s)
	}
	for _, mode := range []string{ModeFull, ModePartial} {
		m.Syncs.WithLabelValues(mode)
	}
	if reg != nil {
		reg.MustRegister(m.collectors()...)
	}
	return m
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		m.SyncDuration, m.NetworkProgrammingDuration, m.LastSyncTimestamp, m.Syncs, m.SyncErrors,
		m.ServicesProgrammed, m.VirtualServicesProgrammed, m.RealServersProgrammed,
		m.AnnouncedIPs, m.HealthCheckPorts,
	}
}

// ObserveProgramming records the network programming latency of changes
// triggered at triggers and applied at now. Zero times are skipped;
// triggers in the future (clock skew with the API server) count as 0.
func (m *Metrics) ObserveProgramming(now time.Time, triggers []time.Time) {
	for _, t := range triggers {
		if t.IsZero() {
			continue
		}
		m.NetworkProgrammingDuration.Observe(max(now.Sub(t), 0).Seconds())
	}
}
