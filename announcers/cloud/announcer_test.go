package cloud_test

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/switchyard-lb/switchyard/announcers/cloud"
	"github.com/switchyard-lb/switchyard/announcers/cloud/cloudtest"
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/test/harness"
)

const token = "s3cret"

// deadline bounds waits; generous, never a measure of speed.
const deadline = 20 * time.Second

var (
	web  = model.ServiceKey{Namespace: "default", Name: "web"}
	api  = model.ServiceKey{Namespace: "shop", Name: "api"}
	ip4  = netip.MustParseAddr("203.0.113.10")
	ip4b = netip.MustParseAddr("203.0.113.11")
	ip6  = netip.MustParseAddr("2001:db8::10")

	nodeA = cloud.Node{Name: "node-a", Addrs: []netip.Addr{netip.MustParseAddr("fd00::1"), netip.MustParseAddr("10.0.0.1")}}
	nodeB = cloud.Node{Name: "node-b", Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.2")}}

	// The same nodes as the contract spells them.
	wireA = cloudtest.Node{Name: "node-a", Addresses: []string{"10.0.0.1", "fd00::1"}, Weight: 1}
	wireB = cloudtest.Node{Name: "node-b", Addresses: []string{"10.0.0.2"}, Weight: 1}
)

type env struct {
	srv       *cloudtest.Server
	a         *cloud.Announcer
	rec       *harness.List[cloud.Call] // the OnCall hooks
	tokenFile string
}

func setup(t *testing.T, mod ...func(*cloud.Options)) *env {
	t.Helper()
	srv := cloudtest.New(token)
	t.Cleanup(srv.Close)
	tf := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tf, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rec := &harness.List[cloud.Call]{}
	opts := cloud.Options{
		URL:            srv.URL + "/",
		NodeName:       "node-a",
		TokenFile:      tf,
		InitialBackoff: time.Millisecond,
		MaxBackoff:     20 * time.Millisecond,
		ResyncInterval: -1,
		OnCall:         rec.Add,
	}
	for _, m := range mod {
		m(&opts)
	}
	a, err := cloud.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return &env{srv: srv, a: a, rec: rec, tokenFile: tf}
}

func synced(t *testing.T, a *cloud.Announcer) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	err := a.Synced(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Synced: %v", err)
	}
	return err
}

func announce(t *testing.T, a *cloud.Announcer, set ...model.Announcement) {
	t.Helper()
	if err := a.Announce(context.Background(), set); err != nil {
		t.Fatalf("Announce: %v", err)
	}
}

func an(ip netip.Addr, svc model.ServiceKey) model.Announcement {
	return model.Announcement{Addr: ip, Service: svc}
}

// methods summarises requests as "METHOD path status".
func methods(reqs []cloudtest.Request) []string {
	var out []string
	for _, r := range reqs {
		out = append(out, r.Method+" "+r.Path+" "+http.StatusText(r.Status))
	}
	return out
}

func TestEnsureIdempotentRelease(t *testing.T) {
	e := setup(t)
	if err := e.a.SetNodes([]cloud.Node{nodeB, nodeA}); err != nil {
		t.Fatal(err)
	}
	// Two Services share ip4; ip6 is one Service's.
	announce(t, e.a, an(ip4, web), an(ip6, api), an(ip4, api))
	if err := synced(t, e.a); err != nil {
		t.Fatalf("Synced: %v", err)
	}
	want := map[string]cloudtest.Address{
		"203.0.113.10": {Address: "203.0.113.10", Owner: "node-a", Services: []string{"default/web", "shop/api"}, Nodes: []cloudtest.Node{wireA, wireB}},
		"2001:db8::10": {Address: "2001:db8::10", Owner: "node-a", Services: []string{"shop/api"}, Nodes: []cloudtest.Node{wireA, wireB}},
	}
	if diff := cmp.Diff(want, e.srv.Addresses()); diff != "" {
		t.Fatalf("provider state after ensure (-want +got):\n%s", diff)
	}
	for _, r := range e.srv.Requests() {
		if r.Authorization != "Bearer "+token || r.IdempotencyKey == "" {
			t.Errorf("%s %s: Authorization %q, Idempotency-Key %q", r.Method, r.Path, r.Authorization, r.IdempotencyKey)
		}
	}

	t.Run("repeat sends nothing", func(t *testing.T) {
		before := len(e.srv.Requests())
		announce(t, e.a, an(ip4, api), an(ip4, web), an(ip6, api))
		if err := e.a.SetNodes([]cloud.Node{nodeA, nodeB}); err != nil {
			t.Fatal(err)
		}
		if err := synced(t, e.a); err != nil {
			t.Fatalf("Synced: %v", err)
		}
		if got := e.srv.Requests()[before:]; len(got) != 0 {
			t.Errorf("an unchanged set sent %v", methods(got))
		}
	})

	t.Run("a restarted announcer re-ensures the same state", func(t *testing.T) {
		before := len(e.srv.Requests())
		// A fresh announcer (a restarted daemon), same provider.
		a2, err := cloud.New(cloud.Options{URL: e.srv.URL, NodeName: "node-a", TokenFile: e.tokenFile})
		if err != nil {
			t.Fatal(err)
		}
		defer a2.Close()
		if err := a2.SetNodes([]cloud.Node{nodeA, nodeB}); err != nil {
			t.Fatal(err)
		}
		announce(t, a2, an(ip4, web), an(ip4, api), an(ip6, api))
		if err := synced(t, a2); err != nil {
			t.Fatalf("Synced: %v", err)
		}
		if diff := cmp.Diff(want, e.srv.Addresses()); diff != "" {
			t.Errorf("provider state after a repeated ensure (-want +got):\n%s", diff)
		}
		wantReqs := []string{"PUT /v1/addresses/203.0.113.10 OK", "PUT /v1/addresses/2001:db8::10 OK"}
		if diff := cmp.Diff(wantReqs, methods(e.srv.Requests()[before:])); diff != "" {
			t.Errorf("requests (-want +got):\n%s", diff)
		}
	})

	t.Run("node set change re-ensures", func(t *testing.T) {
		if err := e.a.SetNodes([]cloud.Node{nodeB}); err != nil {
			t.Fatal(err)
		}
		if err := synced(t, e.a); err != nil {
			t.Fatalf("Synced: %v", err)
		}
		for addr, got := range e.srv.Addresses() {
			if diff := cmp.Diff([]cloudtest.Node{wireB}, got.Nodes); diff != "" {
				t.Errorf("%s nodes (-want +got):\n%s", addr, diff)
			}
		}
	})

	t.Run("release", func(t *testing.T) {
		before := len(e.srv.Requests())
		announce(t, e.a, an(ip6, api))
		if err := synced(t, e.a); err != nil {
			t.Fatalf("Synced: %v", err)
		}
		if _, ok := e.srv.Addresses()["203.0.113.10"]; ok {
			t.Error("203.0.113.10 still served after release")
		}
		reqs := e.srv.Requests()[before:]
		if diff := cmp.Diff([]string{"DELETE /v1/addresses/203.0.113.10 No Content"}, methods(reqs)); diff != "" {
			t.Fatalf("requests (-want +got):\n%s", diff)
		}
		if reqs[0].Query != "owner=node-a" {
			t.Errorf("release query %q, want owner=node-a", reqs[0].Query)
		}
		announce(t, e.a)
		if err := synced(t, e.a); err != nil {
			t.Fatalf("Synced: %v", err)
		}
		if got := e.srv.Addresses(); len(got) != 0 {
			t.Errorf("provider still serves %v after withdrawing everything", got)
		}
	})
}

func TestReleaseOfAddressMovedToAnotherOwner(t *testing.T) {
	e := setup(t)
	if err := e.a.SetNodes([]cloud.Node{nodeA}); err != nil {
		t.Fatal(err)
	}
	announce(t, e.a, an(ip4, web))
	if err := synced(t, e.a); err != nil {
		t.Fatal(err)
	}
	// node-b became the owner and ensured the address.
	moved := cloudtest.Address{Address: ip4.String(), Owner: "node-b", Services: []string{"default/web"}, Nodes: []cloudtest.Node{wireA}}
	e.srv.Ensure(moved)
	announce(t, e.a)
	if err := synced(t, e.a); err != nil {
		t.Fatalf("a 409 on release is not an error: %v", err)
	}
	if diff := cmp.Diff(map[string]cloudtest.Address{ip4.String(): moved}, e.srv.Addresses()); diff != "" {
		t.Errorf("the new owner's address was touched (-want +got):\n%s", diff)
	}
	if err := e.a.Healthy(); err != nil {
		t.Errorf("Healthy: %v", err)
	}
}

func TestNothingEnsuredBeforeNodes(t *testing.T) {
	e := setup(t)
	announce(t, e.a, an(ip4, web))
	if err := synced(t, e.a); err != nil {
		t.Fatal(err)
	}
	if got := e.srv.Requests(); len(got) != 0 {
		t.Fatalf("requests before SetNodes: %v", methods(got))
	}
	if err := e.a.SetNodes(nil); err != nil { // known to be empty: fine
		t.Fatal(err)
	}
	if err := synced(t, e.a); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]cloudtest.Node{}, e.srv.Addresses()[ip4.String()].Nodes); diff != "" {
		t.Errorf("nodes (-want +got):\n%s", diff)
	}
}

func TestServerErrorsAreRetried(t *testing.T) {
	e := setup(t)
	e.srv.FailNext(
		cloudtest.Fault{Status: http.StatusInternalServerError},
		cloudtest.Fault{Status: http.StatusServiceUnavailable, RetryAfter: "0"},
		cloudtest.Fault{Status: http.StatusTooManyRequests},
	)
	if err := e.a.SetNodes([]cloud.Node{nodeA}); err != nil {
		t.Fatal(err)
	}
	announce(t, e.a, an(ip4, web))
	if err := synced(t, e.a); err != nil {
		t.Fatalf("Synced after recovery: %v", err)
	}
	if _, ok := e.srv.Addresses()[ip4.String()]; !ok {
		t.Fatal("address not ensured after the provider recovered")
	}
	want := []string{
		"PUT /v1/addresses/203.0.113.10 Internal Server Error",
		"PUT /v1/addresses/203.0.113.10 Service Unavailable",
		"PUT /v1/addresses/203.0.113.10 Too Many Requests",
		"PUT /v1/addresses/203.0.113.10 Created",
	}
	if diff := cmp.Diff(want, methods(e.srv.Requests())); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
	var retried []bool
	for _, c := range e.rec.All() {
		retried = append(retried, c.Retry)
		if (c.Err == nil) != (c.Status == http.StatusCreated) {
			t.Errorf("call %+v: error and status disagree", c)
		}
	}
	if diff := cmp.Diff([]bool{true, true, true, false}, retried); diff != "" {
		t.Errorf("OnCall Retry flags (-want +got):\n%s", diff)
	}
	if err := e.a.Healthy(); err != nil {
		t.Errorf("Healthy after recovery: %v", err)
	}
}

func TestClientErrorIsReportedNotRetried(t *testing.T) {
	e := setup(t)
	e.srv.FailNext(cloudtest.Fault{Method: http.MethodPut, Status: http.StatusUnprocessableEntity})
	if err := e.a.SetNodes([]cloud.Node{nodeA}); err != nil {
		t.Fatal(err)
	}
	announce(t, e.a, an(ip4, web))
	err := synced(t, e.a)
	if err == nil || !strings.Contains(err.Error(), "422") || !strings.Contains(err.Error(), "injected fault") ||
		!strings.Contains(err.Error(), ip4.String()) {
		t.Fatalf("Synced = %v, want the 422 for %s with the provider's reason", err, ip4)
	}
	if herr := e.a.Healthy(); herr == nil || herr.Error() != err.Error() {
		t.Errorf("Healthy = %v, want %v", herr, err)
	}
	// Another change makes a pass: the rejected address is not retried.
	announce(t, e.a, an(ip4, web), an(ip4b, web))
	if err := synced(t, e.a); err == nil {
		t.Fatal("rejection forgotten while the address's desired state is the same")
	}
	want := []string{"PUT /v1/addresses/203.0.113.10 Unprocessable Entity", "PUT /v1/addresses/203.0.113.11 Created"}
	if diff := cmp.Diff(want, methods(e.srv.Requests())); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
	// A new desired state for the address is tried, and clears the report.
	announce(t, e.a, an(ip4, web), an(ip4, api), an(ip4b, web))
	if err := synced(t, e.a); err != nil {
		t.Fatalf("Synced after a new state: %v", err)
	}
	if got := e.srv.Addresses()[ip4.String()].Services; !cmp.Equal(got, []string{"default/web", "shop/api"}) {
		t.Errorf("services %v", got)
	}
}

func TestTokenFromFile(t *testing.T) {
	e := setup(t)
	if err := os.WriteFile(e.tokenFile, []byte("expired"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.a.SetNodes([]cloud.Node{nodeA}); err != nil {
		t.Fatal(err)
	}
	announce(t, e.a, an(ip4, web))
	// 401s are retried while the Secret is rotated.
	start := time.Now()
	for len(e.srv.Requests()) < 2 {
		if time.Since(start) > deadline {
			t.Fatal("401 not retried")
		}
		<-e.srv.Arrived()
	}
	if err := e.a.Healthy(); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("Healthy = %v, want the 401", err)
	}
	if err := os.WriteFile(e.tokenFile, []byte(" "+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := synced(t, e.a); err != nil {
		t.Fatalf("Synced after rotation: %v", err)
	}
	reqs := e.srv.Requests()
	if last := reqs[len(reqs)-1]; last.Authorization != "Bearer "+token || last.Status != http.StatusCreated {
		t.Errorf("last request: Authorization %q, status %d", last.Authorization, last.Status)
	}
	for _, r := range reqs[:len(reqs)-1] {
		if r.Authorization != "Bearer expired" {
			t.Errorf("earlier request with Authorization %q", r.Authorization)
		}
	}
}

func TestContextCancellation(t *testing.T) {
	t.Run("announce with a cancelled context", func(t *testing.T) {
		e := setup(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := e.a.Announce(ctx, []model.Announcement{an(ip4, web)}); !errors.Is(err, context.Canceled) {
			t.Errorf("Announce = %v, want context.Canceled", err)
		}
		if err := e.a.SetNodes([]cloud.Node{nodeA}); err != nil {
			t.Fatal(err)
		}
		if err := synced(t, e.a); err != nil {
			t.Fatal(err)
		}
		if got := e.srv.Requests(); len(got) != 0 {
			t.Errorf("a cancelled Announce sent %v", methods(got))
		}
	})

	t.Run("Synced gives up with its context; Close aborts the call in flight", func(t *testing.T) {
		e := setup(t)
		release := e.srv.Hang()
		defer release()
		if err := e.a.SetNodes([]cloud.Node{nodeA}); err != nil {
			t.Fatal(err)
		}
		announce(t, e.a, an(ip4, web))
		<-e.srv.Arrived()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := e.a.Synced(ctx); !errors.Is(err, context.Canceled) {
			t.Errorf("Synced = %v, want context.Canceled", err)
		}
		closed := make(chan error)
		go func() { closed <- e.a.Close() }()
		select {
		case err := <-closed:
			if err != nil {
				t.Errorf("Close: %v", err)
			}
		case <-time.After(deadline):
			t.Fatal("Close blocked on a hanging call")
		}
		if err := e.a.Announce(context.Background(), nil); !errors.Is(err, cloud.ErrClosed) {
			t.Errorf("Announce after Close = %v, want ErrClosed", err)
		}
		if err := e.a.Synced(context.Background()); err != nil && !errors.Is(err, cloud.ErrClosed) {
			t.Errorf("Synced after Close = %v", err)
		}
	})

	t.Run("a call that times out is retried", func(t *testing.T) {
		e := setup(t, func(o *cloud.Options) { o.Timeout = 20 * time.Millisecond })
		release := e.srv.Hang()
		if err := e.a.SetNodes([]cloud.Node{nodeA}); err != nil {
			t.Fatal(err)
		}
		announce(t, e.a, an(ip4, web))
		start := time.Now()
		for !hasTimeout(e.rec.All()) {
			if time.Since(start) > deadline {
				t.Fatal("no timed-out call reported")
			}
			<-e.srv.Arrived()
		}
		release()
		if err := synced(t, e.a); err != nil {
			t.Fatalf("Synced after the provider answered again: %v", err)
		}
	})
}

func hasTimeout(calls []cloud.Call) bool {
	for _, c := range calls {
		if errors.Is(c.Err, context.DeadlineExceeded) && c.Retry {
			return true
		}
	}
	return false
}

// TestConcurrentUse runs every method from many goroutines (under -race),
// then checks that the last state wins.
func TestConcurrentUse(t *testing.T) {
	e := setup(t)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				switch (g + i) % 4 {
				case 0:
					_ = e.a.Announce(context.Background(), []model.Announcement{an(ip4, web), an(ip6, api)})
				case 1:
					_ = e.a.Announce(context.Background(), []model.Announcement{an(ip4b, web)})
				case 2:
					_ = e.a.SetNodes([]cloud.Node{nodeA, nodeB}[:1+i%2])
				case 3:
					_ = e.a.Healthy()
				}
			}
		}()
	}
	wg.Wait()
	if err := e.a.SetNodes([]cloud.Node{nodeB}); err != nil {
		t.Fatal(err)
	}
	announce(t, e.a, an(ip6, api))
	if err := synced(t, e.a); err != nil {
		t.Fatal(err)
	}
	want := map[string]cloudtest.Address{
		"2001:db8::10": {Address: "2001:db8::10", Owner: "node-a", Services: []string{"shop/api"}, Nodes: []cloudtest.Node{wireB}},
	}
	if diff := cmp.Diff(want, e.srv.Addresses()); diff != "" {
		t.Errorf("provider state (-want +got):\n%s", diff)
	}
}

// TestResyncRepairs: state lost at the provider behind the announcer's
// back comes back with the periodic resync, without a new Announce.
func TestResyncRepairs(t *testing.T) {
	e := setup(t, func(o *cloud.Options) { o.ResyncInterval = 10 * time.Millisecond })
	if err := e.a.SetNodes([]cloud.Node{nodeA}); err != nil {
		t.Fatal(err)
	}
	announce(t, e.a, an(ip4, web))
	if err := synced(t, e.a); err != nil {
		t.Fatal(err)
	}
	e.srv.Forget(ip4.String())
	start := time.Now()
	for {
		if _, ok := e.srv.Addresses()[ip4.String()]; ok {
			break
		}
		if time.Since(start) > deadline {
			t.Fatal("lost address never ensured again")
		}
		<-e.srv.Arrived()
	}
}

func TestNewValidates(t *testing.T) {
	for _, o := range []cloud.Options{
		{URL: "", NodeName: "n"},
		{URL: "ftp://x/", NodeName: "n"},
		{URL: "/relative", NodeName: "n"},
		{URL: "http://x/"},
	} {
		if a, err := cloud.New(o); err == nil {
			a.Close()
			t.Errorf("New(%+v) accepted", o)
		}
	}
}

// TestNodesOfAnnouncement: an announcement's Nodes (externalTrafficPolicy
// Local: the nodes with a ready endpoint) restrict its address to those
// of SetNodes' nodes, and a change of them alone ensures that address
// again, and only it.
func TestNodesOfAnnouncement(t *testing.T) {
	e := setup(t)
	if err := e.a.SetNodes([]cloud.Node{nodeA, nodeB}); err != nil {
		t.Fatal(err)
	}
	only := func(ip netip.Addr, svc model.ServiceKey, nodes ...string) model.Announcement {
		a := an(ip, svc)
		a.Nodes = append([]string{}, nodes...)
		return a
	}
	nodesOf := func() map[string][]cloudtest.Node {
		out := map[string][]cloudtest.Node{}
		for addr, got := range e.srv.Addresses() {
			out[addr] = got.Nodes
		}
		return out
	}
	steps := []struct {
		name      string
		nodes     []cloud.Node // SetNodes first when set
		set       []model.Announcement
		wantNodes map[string][]cloudtest.Node
		wantReqs  []string
	}{
		{
			name: "restricted, unrestricted, and a name SetNodes does not know",
			set:  []model.Announcement{only(ip4, web, "node-b"), only(ip4b, api, "node-a", "node-c"), an(ip6, api)},
			wantNodes: map[string][]cloudtest.Node{
				"203.0.113.10": {wireB}, "203.0.113.11": {wireA}, "2001:db8::10": {wireA, wireB},
			},
			wantReqs: []string{"PUT /v1/addresses/203.0.113.10 Created", "PUT /v1/addresses/203.0.113.11 Created", "PUT /v1/addresses/2001:db8::10 Created"},
		},
		{
			name: "the same again sends nothing",
			set:  []model.Announcement{only(ip4, web, "node-b"), only(ip4b, api, "node-a", "node-c"), an(ip6, api)},
			wantNodes: map[string][]cloudtest.Node{
				"203.0.113.10": {wireB}, "203.0.113.11": {wireA}, "2001:db8::10": {wireA, wireB},
			},
		},
		{
			name: "an endpoint appears on node-a: only that address is ensured again",
			set:  []model.Announcement{only(ip4, web, "node-a", "node-b"), only(ip4b, api, "node-a", "node-c"), an(ip6, api)},
			wantNodes: map[string][]cloudtest.Node{
				"203.0.113.10": {wireA, wireB}, "203.0.113.11": {wireA}, "2001:db8::10": {wireA, wireB},
			},
			wantReqs: []string{"PUT /v1/addresses/203.0.113.10 OK"},
		},
		{
			name: "Services sharing an address: the union of their nodes",
			set:  []model.Announcement{only(ip4, web, "node-b"), only(ip4, api, "node-a"), only(ip4b, api, "node-a", "node-c"), an(ip6, api)},
			wantNodes: map[string][]cloudtest.Node{
				"203.0.113.10": {wireA, wireB}, "203.0.113.11": {wireA}, "2001:db8::10": {wireA, wireB},
			},
			wantReqs: []string{"PUT /v1/addresses/203.0.113.10 OK"}, // its services changed
		},
		{
			// The same announcements: what changes is SetNodes' only.
			name:  "node-a leaves the node list",
			nodes: []cloud.Node{nodeB},
			set:   []model.Announcement{only(ip4, web, "node-b"), only(ip4, api, "node-a"), only(ip4b, api, "node-a", "node-c"), an(ip6, api)},
			wantNodes: map[string][]cloudtest.Node{
				"203.0.113.10": {wireB}, "203.0.113.11": {}, "2001:db8::10": {wireB},
			},
			wantReqs: []string{"PUT /v1/addresses/203.0.113.10 OK", "PUT /v1/addresses/203.0.113.11 OK", "PUT /v1/addresses/2001:db8::10 OK"},
		},
		{
			name: "no serving node at all",
			set:  []model.Announcement{only(ip4, web), only(ip4b, api, "node-a", "node-c"), an(ip6, api)},
			wantNodes: map[string][]cloudtest.Node{
				"203.0.113.10": {}, "203.0.113.11": {}, "2001:db8::10": {wireB},
			},
			wantReqs: []string{"PUT /v1/addresses/203.0.113.10 OK"},
		},
	}
	for _, s := range steps {
		before := len(e.srv.Requests())
		if s.nodes != nil {
			if err := e.a.SetNodes(s.nodes); err != nil {
				t.Fatal(err)
			}
		}
		announce(t, e.a, s.set...)
		if err := synced(t, e.a); err != nil {
			t.Fatalf("%s: Synced: %v", s.name, err)
		}
		if diff := cmp.Diff(s.wantNodes, nodesOf()); diff != "" {
			t.Errorf("%s: nodes at the provider (-want +got):\n%s", s.name, diff)
		}
		if diff := cmp.Diff(s.wantReqs, methods(e.srv.Requests()[before:])); diff != "" {
			t.Errorf("%s: requests (-want +got):\n%s", s.name, diff)
		}
	}
}

// TestWeightsFollowLocalEndpoints: each node of an ensure carries its
// weight (model.Announcement.Weights: a node's ready endpoints of an
// externalTrafficPolicy Local Service), a change of a weight alone
// ensures that address again and only it, the same weights send nothing,
// and an address without Nodes weighs every node 1.
func TestWeightsFollowLocalEndpoints(t *testing.T) {
	e := setup(t)
	if err := e.a.SetNodes([]cloud.Node{nodeA, nodeB}); err != nil {
		t.Fatal(err)
	}
	weighed := func(ip netip.Addr, svc model.ServiceKey, aw, bw int) model.Announcement {
		a := an(ip, svc)
		a.Nodes, a.Weights = []string{"node-a", "node-b"}, []int{aw, bw}
		return a
	}
	w := func(n cloudtest.Node, weight int) cloudtest.Node { n.Weight = weight; return n }
	steps := []struct {
		name      string
		set       []model.Announcement
		wantNodes map[string][]cloudtest.Node
		wantReqs  []string
	}{
		{
			name: "weights by node; an address without Nodes weighs 1",
			set:  []model.Announcement{weighed(ip4, web, 1, 3), an(ip6, api)},
			wantNodes: map[string][]cloudtest.Node{
				"203.0.113.10": {w(wireA, 1), w(wireB, 3)}, "2001:db8::10": {w(wireA, 1), w(wireB, 1)},
			},
			wantReqs: []string{"PUT /v1/addresses/203.0.113.10 Created", "PUT /v1/addresses/2001:db8::10 Created"},
		},
		{
			name: "the same weights send nothing",
			set:  []model.Announcement{weighed(ip4, web, 1, 3), an(ip6, api)},
			wantNodes: map[string][]cloudtest.Node{
				"203.0.113.10": {w(wireA, 1), w(wireB, 3)}, "2001:db8::10": {w(wireA, 1), w(wireB, 1)},
			},
		},
		{
			name: "node-a gains two endpoints: that address only is ensured again",
			set:  []model.Announcement{weighed(ip4, web, 3, 3), an(ip6, api)},
			wantNodes: map[string][]cloudtest.Node{
				"203.0.113.10": {w(wireA, 3), w(wireB, 3)}, "2001:db8::10": {w(wireA, 1), w(wireB, 1)},
			},
			wantReqs: []string{"PUT /v1/addresses/203.0.113.10 OK"},
		},
		{
			name: "Services sharing the address: each node's largest weight",
			set:  []model.Announcement{weighed(ip4, web, 3, 3), weighed(ip4, api, 2, 5), an(ip6, api)},
			wantNodes: map[string][]cloudtest.Node{
				"203.0.113.10": {w(wireA, 3), w(wireB, 5)}, "2001:db8::10": {w(wireA, 1), w(wireB, 1)},
			},
			wantReqs: []string{"PUT /v1/addresses/203.0.113.10 OK"},
		},
	}
	for _, s := range steps {
		before := len(e.srv.Requests())
		announce(t, e.a, s.set...)
		if err := synced(t, e.a); err != nil {
			t.Fatalf("%s: Synced: %v", s.name, err)
		}
		got := map[string][]cloudtest.Node{}
		for addr, a := range e.srv.Addresses() {
			got[addr] = a.Nodes
		}
		if diff := cmp.Diff(s.wantNodes, got); diff != "" {
			t.Errorf("%s: nodes at the provider (-want +got):\n%s", s.name, diff)
		}
		if diff := cmp.Diff(s.wantReqs, methods(e.srv.Requests()[before:])); diff != "" {
			t.Errorf("%s: requests (-want +got):\n%s", s.name, diff)
		}
	}

	// Weights that do not match the nodes are refused, and the last
	// good state stays.
	before := len(e.srv.Requests())
	bad := weighed(ip4, web, 1, 1)
	bad.Weights = []int{1}
	negative := weighed(ip4, web, -1, 1)
	for _, set := range [][]model.Announcement{{bad}, {negative}} {
		if err := e.a.Announce(context.Background(), set); err == nil || !strings.Contains(err.Error(), "weight") {
			t.Errorf("Announce(%v) = %v, want an error about weights", set, err)
		}
	}
	if err := synced(t, e.a); err != nil {
		t.Fatal(err)
	}
	if got := methods(e.srv.Requests()[before:]); len(got) != 0 {
		t.Errorf("refused announcements sent %v", got)
	}
}
