// Package status serves the daemon's own HTTP endpoints: the health server
// (/livez, /healthz with kube-proxy's semantics, /readyz) and the metrics
// server (/metrics, /debug/state). It owns the bookkeeping /healthz needs
// (SyncTracker) and nothing else: what is healthy or ready is asked of
// functions the daemon passes in.
package status
