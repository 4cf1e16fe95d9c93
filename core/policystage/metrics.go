package policystage

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-lb/switchyard/core/metrics"
)

// Values of the result label of Metrics.Evaluations.
const (
	ResultSuccess = "success"
	ResultFailure = "failure"
)

// Metrics are the policy stage's metrics.
type Metrics struct {
	// Evaluations counts policy evaluations by policy and result.
	Evaluations *prometheus.CounterVec
	// Duration observes how long one evaluation took, by policy.
	Duration *prometheus.HistogramVec
	// Failures counts failures by policy and reason: a failed load once
	// per policy and failure (not per Service or evaluation), a failed
	// evaluation each time.
	Failures *prometheus.CounterVec
	// StatsReadFailures counts failed reads of the dataplane's live
	// statistics (one read per statistics tick).
	StatsReadFailures prometheus.Counter
}

// NewMetrics builds the policy metrics and registers them on reg
// (MustRegister). A nil reg leaves them unregistered.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Evaluations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Name: "policy_evaluations_total",
			Help: "Balancing policy evaluations, by policy and result (success or failure).",
		}, []string{"policy", "result"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metrics.Namespace, Name: "policy_evaluation_duration_seconds",
			Help:    "Time one balancing policy evaluation took, by policy.",
			Buckets: prometheus.ExponentialBuckets(1e-6, 4, 12),
		}, []string{"policy"}),
		Failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Name: "policy_failures_total",
			Help: "Balancing policy failures, by policy and reason (load, deadline, trap, declined, invalid_output, error): a policy version that fails to load (or a policy not found) counts once, a failed evaluation each time; the Services fell back.",
		}, []string{"policy", "reason"}),
		StatsReadFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Name: "policy_stats_read_failures_total",
			Help: "Failed reads of the dataplane's live statistics for balancing policies (one read per statistics tick); policies kept the last good statistics of what could not be read.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.Evaluations, m.Duration, m.Failures, m.StatsReadFailures)
	}
	return m
}
