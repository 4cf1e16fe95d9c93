package main

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestWithProfiling(t *testing.T) {
	metrics := http.NewServeMux()
	metrics.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	tests := []struct {
		name string
		h    http.Handler
		want map[string]int // status by path
	}{
		{
			name: "off",
			h:    metrics,
			want: map[string]int{"/metrics": http.StatusTeapot, "/debug/pprof/": http.StatusNotFound, "/debug/pprof/cmdline": http.StatusNotFound},
		},
		{
			name: "on",
			h:    withProfiling(metrics),
			want: map[string]int{"/metrics": http.StatusTeapot, "/debug/pprof/": http.StatusOK, "/debug/pprof/cmdline": http.StatusOK},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := map[string]int{}
			for path := range tt.want {
				rec := httptest.NewRecorder()
				tt.h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
				got[path] = rec.Code
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("status by path (-want +got):\n%s", diff)
			}
		})
	}
}
