package main

import (
	"net/http"
	"net/http/pprof"
)

// withProfiling serves Go's profiles under /debug/pprof/ (--profiling) and
// everything else through h. The package's own registrations on
// http.DefaultServeMux are never served.
func withProfiling(h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
