package healthcheck_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/healthcheck"
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/test/harness"
)

var (
	web = model.ServiceKey{Namespace: "default", Name: "web"}
	db  = model.ServiceKey{Namespace: "prod", Name: "db"}
)

var loopback = []netip.Addr{netip.MustParseAddr("127.0.0.1")}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) uint16 {
	t.Helper()
	return uint16(harness.FreePort(t, loopback[0]))
}

type answer struct {
	Status      int
	ContentType string
	NoSniff     string
	// Weight is the X-Load-Balancing-Endpoint-Weight header.
	Weight string
	Body   string
}

var client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// get asks the health check on port; a refused connection is Status 0.
func get(t *testing.T, port uint16, path string) answer {
	t.Helper()
	resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return answer{}
		}
		t.Fatalf("GET port %d: %v", port, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("X-Content-Type-Options"),
		resp.Header.Get("X-Load-Balancing-Endpoint-Weight"), string(body)}
}

func body(key model.ServiceKey, n int, healthy bool) string {
	return fmt.Sprintf("{\n\t\"service\": {\n\t\t\"namespace\": %q,\n\t\t\"name\": %q\n\t},\n\t\"localEndpoints\": %d,\n\t\"serviceProxyHealthy\": %v\n}",
		key.Namespace, key.Name, n, healthy)
}

func ok(key model.ServiceKey, n int) answer {
	return answer{200, "application/json", "nosniff", strconv.Itoa(n), body(key, n, true)}
}

// capped is ok with more endpoints than the weight header carries.
func capped(key model.ServiceKey, n int) answer {
	a := ok(key, n)
	a.Weight = strconv.Itoa(healthcheck.MaxWeight)
	return a
}

func unavailable(key model.ServiceKey, n int, healthy bool) answer {
	return answer{503, "application/json", "nosniff", strconv.Itoa(n), body(key, n, healthy)}
}

var refused = answer{}

func TestSyncScenario(t *testing.T) {
	p1, p2, p3 := freePort(t), freePort(t), freePort(t)
	s := healthcheck.NewServer(loopback, nil)
	t.Cleanup(func() { s.Close() })

	type probe struct {
		port uint16
		path string
		want answer
	}
	steps := []struct {
		name   string
		sync   map[model.ServiceKey]healthcheck.Port
		probes []probe
	}{
		{"open two", map[model.ServiceKey]healthcheck.Port{
			web: {Port: p1, LocalEndpoints: 2},
			db:  {Port: p2, LocalEndpoints: 0},
		}, []probe{
			{p1, "/", ok(web, 2)},
			{p1, "/any/path?x=1", ok(web, 2)},
			{p2, "/healthz", unavailable(db, 0, true)},
		}},
		{"counts change, a Service leaves", map[model.ServiceKey]healthcheck.Port{
			web: {Port: p1, LocalEndpoints: 0},
		}, []probe{
			{p1, "/", unavailable(web, 0, true)},
			{p2, "/", refused},
		}},
		{"endpoints come and go: the count and weight follow", map[model.ServiceKey]healthcheck.Port{
			web: {Port: p1, LocalEndpoints: 3},
		}, []probe{
			{p1, "/", ok(web, 3)},
		}},
		{"more endpoints than Google Cloud's weights reach: the weight is capped, the count is not", map[model.ServiceKey]healthcheck.Port{
			web: {Port: p1, LocalEndpoints: 1500},
		}, []probe{
			{p1, "/", capped(web, 1500)},
		}},
		{"port changes", map[model.ServiceKey]healthcheck.Port{
			web: {Port: p3, LocalEndpoints: 1},
		}, []probe{
			{p1, "/", refused},
			{p3, "/", ok(web, 1)},
		}},
		{"all leave", nil, []probe{
			{p3, "/", refused},
		}},
	}
	for _, st := range steps {
		if err := s.Sync(st.sync); err != nil {
			t.Fatalf("%s: Sync: %v", st.name, err)
		}
		for _, p := range st.probes {
			if diff := cmp.Diff(p.want, get(t, p.port, p.path)); diff != "" {
				t.Errorf("%s: GET :%d%s (-want +got):\n%s", st.name, p.port, p.path, diff)
			}
		}
	}
}

// TestSetEndpoints: a count set alone reaches its health check's answers
// and no other's; a Service without an open health check is refused.
func TestSetEndpoints(t *testing.T) {
	p1, p2 := freePort(t), freePort(t)
	s := healthcheck.NewServer(loopback, nil)
	t.Cleanup(func() { s.Close() })
	if err := s.Sync(map[model.ServiceKey]healthcheck.Port{web: {Port: p1, LocalEndpoints: 2}, db: {Port: p2, LocalEndpoints: 1}}); err != nil {
		t.Fatal(err)
	}
	if !s.SetEndpoints(web, 0) {
		t.Fatal("SetEndpoints(web) = false, want true: its health check is open")
	}
	other := model.ServiceKey{Namespace: "default", Name: "other"}
	if s.SetEndpoints(other, 1) {
		t.Error("SetEndpoints(other) = true, want false: it has no health check")
	}
	for _, p := range []struct {
		port uint16
		want answer
	}{{p1, unavailable(web, 0, true)}, {p2, ok(db, 1)}} {
		if diff := cmp.Diff(p.want, get(t, p.port, "/")); diff != "" {
			t.Errorf("GET :%d (-want +got):\n%s", p.port, diff)
		}
	}
}

func TestSamePortTwiceFailsForTheLaterService(t *testing.T) {
	p := freePort(t)
	s := healthcheck.NewServer(loopback, nil)
	t.Cleanup(func() { s.Close() })
	err := s.Sync(map[model.ServiceKey]healthcheck.Port{
		web: {Port: p, LocalEndpoints: 1},
		db:  {Port: p, LocalEndpoints: 1},
	})
	if err == nil || !strings.Contains(err.Error(), "prod/db") {
		t.Fatalf("Sync error = %v, want one naming prod/db", err)
	}
	if diff := cmp.Diff(ok(web, 1), get(t, p, "/")); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[model.ServiceKey]healthcheck.Port{web: {Port: p, LocalEndpoints: 1}}, s.Ports()); diff != "" {
		t.Errorf("Ports() (-want +got):\n%s", diff)
	}
}

func TestProxyUnhealthyAnswers503(t *testing.T) {
	p := freePort(t)
	var healthy atomic.Bool
	s := healthcheck.NewServer(loopback, nil, healthcheck.WithProxyHealthy(healthy.Load))
	t.Cleanup(func() { s.Close() })
	if err := s.Sync(map[model.ServiceKey]healthcheck.Port{web: {Port: p, LocalEndpoints: 3}}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(unavailable(web, 3, false), get(t, p, "/")); diff != "" {
		t.Errorf("unhealthy proxy (-want +got):\n%s", diff)
	}
	healthy.Store(true)
	if diff := cmp.Diff(ok(web, 3), get(t, p, "/")); diff != "" {
		t.Errorf("healthy proxy (-want +got):\n%s", diff)
	}
}

func TestListenErrorIsRetriedByNextSync(t *testing.T) {
	p := freePort(t)
	var fail atomic.Bool
	fail.Store(true)
	listen := func(network, addr string) (net.Listener, error) {
		if fail.Load() {
			return nil, errors.New("address in use")
		}
		return net.Listen(network, addr)
	}
	s := healthcheck.NewServer(loopback, nil, healthcheck.WithListen(listen))
	t.Cleanup(func() { s.Close() })
	want := map[model.ServiceKey]healthcheck.Port{web: {Port: p, LocalEndpoints: 1}}
	if err := s.Sync(want); err == nil || !strings.Contains(err.Error(), "address in use") {
		t.Fatalf("Sync error = %v, want the listen error", err)
	}
	fail.Store(false)
	if err := s.Sync(want); err != nil {
		t.Fatalf("second Sync: %v", err)
	}
	if diff := cmp.Diff(ok(web, 1), get(t, p, "/")); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestCloseStopsEverything(t *testing.T) {
	p := freePort(t)
	s := healthcheck.NewServer(loopback, nil)
	if err := s.Sync(map[model.ServiceKey]healthcheck.Port{web: {Port: p, LocalEndpoints: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := get(t, p, "/"); got != refused {
		t.Errorf("after Close GET answered %+v", got)
	}
	if err := s.Sync(nil); err == nil {
		t.Error("Sync after Close: want an error")
	}
}
