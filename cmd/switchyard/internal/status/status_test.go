package status

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-lb/switchyard/core/runner/runnertest"
)

var t0 = time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC)

func TestSyncTracker(t *testing.T) {
	clock := runnertest.NewClock(t0)
	tr := NewSyncTracker(time.Minute, clock.Now)
	var syncStart time.Time
	steps := []struct {
		name        string
		do          func()
		wantHealthy bool
		wantUpdated time.Time
	}{
		{"nothing pending", func() {}, true, time.Time{}},
		{"queued, young", func() { tr.Queued(); clock.Step(59 * time.Second) }, true, time.Time{}},
		{"queued, too old", func() { clock.Step(time.Second) }, false, time.Time{}},
		{"second queue keeps the oldest", func() { tr.Queued() }, false, time.Time{}},
		{"updated clears", func() { syncStart = clock.Now(); tr.Updated(syncStart) }, true, t0.Add(time.Minute)},
		{"queued during a sync stays pending", func() {
			syncStart = clock.Now()
			clock.Step(time.Second)
			tr.Queued()
			clock.Step(time.Second)
			tr.Updated(syncStart)
			clock.Step(time.Minute)
		}, false, t0.Add(time.Minute + 2*time.Second)},
		{"next sync clears it", func() { tr.Updated(clock.Now()) }, true, t0.Add(2*time.Minute + 2*time.Second)},
	}
	for _, s := range steps {
		s.do()
		h := tr.Health()
		if h.Healthy != s.wantHealthy || !h.NodeEligible || !h.LastUpdated.Equal(s.wantUpdated) || !h.CurrentTime.Equal(clock.Now()) {
			t.Errorf("%s: Health() = %+v, want healthy %v, lastUpdated %v, currentTime %v",
				s.name, h, s.wantHealthy, s.wantUpdated, clock.Now())
		}
	}
}

func get(t *testing.T, h http.Handler, method, path string) (int, string, http.Header) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(body), rec.Result().Header
}

func TestHealthHandler(t *testing.T) {
	clock := runnertest.NewClock(t0)
	tr := NewSyncTracker(time.Minute, clock.Now)
	var readyErr error
	h := HealthHandler(tr, func() error { return readyErr })

	type healthz struct {
		LastUpdated  string `json:"lastUpdated"`
		CurrentTime  string `json:"currentTime"`
		NodeEligible bool   `json:"nodeEligible"`
	}
	check := func(name string, wantCode int, want healthz) {
		t.Helper()
		code, body, hdr := get(t, h, http.MethodGet, "/healthz")
		var got healthz
		if err := json.Unmarshal([]byte(body), &got); err != nil {
			t.Fatalf("%s: /healthz body %q: %v", name, body, err)
		}
		if code != wantCode || hdr.Get("Content-Type") != "application/json" {
			t.Errorf("%s: /healthz = %d %s, want %d application/json", name, code, hdr.Get("Content-Type"), wantCode)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: /healthz body mismatch (-want +got):\n%s", name, diff)
		}
	}
	livez := func(name string) {
		t.Helper()
		if code, body, _ := get(t, h, http.MethodGet, "/livez"); code != 200 || body != "ok\n" {
			t.Errorf("%s: /livez = %d %q, want 200 ok", name, code, body)
		}
	}
	check("fresh", 200, healthz{LastUpdated: "0001-01-01 00:00:00 +0000 UTC", CurrentTime: "2026-11-29 20:00:00 +0000 UTC", NodeEligible: true})
	tr.Queued()
	clock.Step(2 * time.Minute)
	check("stale", 503, healthz{LastUpdated: "0001-01-01 00:00:00 +0000 UTC", CurrentTime: "2026-11-29 20:02:00 +0000 UTC", NodeEligible: true})
	livez("stale")
	tr.Updated(clock.Now())
	check("updated", 200, healthz{LastUpdated: "2026-11-29 20:02:00 +0000 UTC", CurrentTime: "2026-11-29 20:02:00 +0000 UTC", NodeEligible: true})
	livez("updated")

	// KEP-3836: a Node being deleted fails /healthz however well the
	// daemon syncs; /livez stays up, and so does the health of the
	// syncs that healthCheckNodePort answers follow.
	tr.SetNodeEligible(false)
	check("node being deleted", 503, healthz{LastUpdated: "2026-11-29 20:02:00 +0000 UTC", CurrentTime: "2026-11-29 20:02:00 +0000 UTC"})
	livez("node being deleted")
	if !tr.Health().Healthy {
		t.Error("node being deleted: Health().Healthy = false, want the syncs' health alone")
	}
	tr.SetNodeEligible(true)
	check("deletion called off", 200, healthz{LastUpdated: "2026-11-29 20:02:00 +0000 UTC", CurrentTime: "2026-11-29 20:02:00 +0000 UTC", NodeEligible: true})
	readyErr = errors.New("no sync applied yet")
	if code, body, _ := get(t, h, http.MethodGet, "/readyz"); code != 503 || body != "not ready: no sync applied yet\n" {
		t.Errorf("/readyz = %d %q, want 503 with the reason", code, body)
	}
	readyErr = nil
	if code, body, _ := get(t, h, http.MethodGet, "/readyz"); code != 200 || body != "ok\n" {
		t.Errorf("/readyz = %d %q, want 200 ok", code, body)
	}
	if code, _, _ := get(t, h, http.MethodGet, "/other"); code != 404 {
		t.Errorf("/other = %d, want 404", code)
	}
}

func TestMetricsHandler(t *testing.T) {
	reg := NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "switchyard_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Add(3)
	state := map[string]any{"node": "n1", "synced": true}
	h := MetricsHandler(reg, func() any { return state })

	code, body, _ := get(t, h, http.MethodGet, "/metrics")
	if code != 200 {
		t.Fatalf("/metrics = %d", code)
	}
	for _, want := range []string{"switchyard_test_total 3", "go_goroutines ", "process_start_time_seconds "} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	code, body, hdr := get(t, h, http.MethodGet, "/debug/state")
	var got map[string]any
	if err := json.Unmarshal([]byte(body), &got); err != nil || code != 200 || hdr.Get("Content-Type") != "application/json" {
		t.Fatalf("/debug/state = %d %q (%v)", code, body, err)
	}
	if diff := cmp.Diff(state, got); diff != "" {
		t.Errorf("/debug/state mismatch (-want +got):\n%s", diff)
	}
	if code, _, hdr := get(t, h, http.MethodPost, "/debug/state"); code != 405 || hdr.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /debug/state = %d Allow %q, want 405 GET, HEAD", code, hdr.Get("Allow"))
	}

	h = MetricsHandler(reg, func() any { return func() {} })
	if code, body, _ := get(t, h, http.MethodGet, "/debug/state"); code != 500 || !strings.Contains(body, "encode") {
		t.Errorf("unencodable state = %d %q, want 500", code, body)
	}
}

func TestServer(t *testing.T) {
	s, err := Listen("test", "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "hi")
	}))
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve() }()
	resp, err := http.Get("http://" + s.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "hi" {
		t.Errorf("body = %q", body)
	}
	if _, err := Listen("second", s.Addr().String(), http.NotFoundHandler()); err == nil || !strings.HasPrefix(err.Error(), "second server: ") {
		t.Errorf("Listen on a busy port = %v, want an error naming the server", err)
	}
	if err := s.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve after Shutdown = %v, want nil", err)
	}
}
