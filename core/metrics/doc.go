// Package metrics owns the Prometheus metrics of Switchyard's control loop,
// all prefixed switchyard_, with kube-proxy's semantics where kube-proxy
// has the same metric: sync duration, network programming latency, time of
// the last successful sync, sync errors, and what is programmed and
// announced. Every metric of the control loop is built here, in New, so
// their names, help texts and buckets live in one place; metrics of other
// parts (policies, configuration reloads, pools, membership) are built by
// their owners under the same Namespace.
package metrics
