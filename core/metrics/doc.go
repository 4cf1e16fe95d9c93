// Package metrics owns the Prometheus metrics of Switchyard's control loop,
// all prefixed switchyard_, with kube-proxy's semantics where kube-proxy
// has the same metric: sync duration, network programming latency, time of
// the last successful sync, sync errors, and what is programmed and
// announced. Every metric is built here, in New, so names, help texts and
// buckets live in one place.
package metrics
