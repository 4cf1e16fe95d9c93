package status

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// HealthHandler serves /livez, /healthz and /readyz.
//   - /livez answers 200 while the process serves HTTP.
//   - /healthz answers as kube-proxy's (v1.31+) does: 200 while tracker is
//     healthy and the node eligible (not being deleted, KEP-3836), 503
//     otherwise, with a JSON body {"lastUpdated", "currentTime",
//     "nodeEligible"} whose times are in Go's default format, as
//     kube-proxy writes them. /livez does not depend on the node.
//   - /readyz answers 200 once ready returns nil, 503 with its reason
//     before.
func HealthHandler(tracker *SyncTracker, ready func() error) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) {
		writeText(w, http.StatusOK, "ok")
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		h := tracker.Health()
		code := http.StatusOK
		if !h.Healthy || !h.NodeEligible {
			code = http.StatusServiceUnavailable
		}
		body := struct {
			LastUpdated  string `json:"lastUpdated"`
			CurrentTime  string `json:"currentTime"`
			NodeEligible bool   `json:"nodeEligible"`
		}{h.LastUpdated.String(), h.CurrentTime.String(), h.NodeEligible}
		writeJSON(w, code, body)
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			writeText(w, http.StatusServiceUnavailable, "not ready: "+err.Error())
			return
		}
		writeText(w, http.StatusOK, "ok")
	})
	return mux
}

// MetricsHandler serves /metrics from gatherer and /debug/state as the
// JSON of what state returns.
func MetricsHandler(gatherer prometheus.Gatherer, state func() any) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("/debug/state", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeText(w, http.StatusMethodNotAllowed, "method not allowed")
			return
		}
		writeJSON(w, http.StatusOK, state())
	})
	return mux
}

// NewRegistry returns a registry holding the Go runtime and process
// collectors, for the daemon's own metrics to join.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		writeText(w, http.StatusInternalServerError, fmt.Sprintf("encode: %v", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}

func writeText(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	fmt.Fprintln(w, msg)
}
