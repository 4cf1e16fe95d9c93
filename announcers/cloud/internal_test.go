package cloud

import (
	"net/netip"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/model"
)

func TestBackoff(t *testing.T) {
	a := &Announcer{opts: Options{InitialBackoff: 500 * time.Millisecond, MaxBackoff: 30 * time.Second}}
	tests := []struct {
		n    int
		hint time.Duration
		base time.Duration // the wait before jitter
	}{
		{1, 0, 500 * time.Millisecond},
		{2, 0, time.Second},
		{3, 0, 2 * time.Second},
		{7, 0, 30 * time.Second}, // 32 s capped
		{100, 0, 30 * time.Second},
		{1, 5 * time.Second, 5 * time.Second}, // Retry-After lengthens
		{1, time.Hour, 30 * time.Second},      // never beyond the cap
		{4, time.Second, 4 * time.Second},     // a shorter Retry-After does not shorten
	}
	for _, tt := range tests {
		for range 20 {
			got := a.backoff(tt.n, tt.hint)
			if got < tt.base || got > tt.base+tt.base/5 {
				t.Errorf("backoff(%d, %v) = %v, want within [%v, %v]", tt.n, tt.hint, got, tt.base, tt.base+tt.base/5)
			}
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"": 0, "3": 3 * time.Second, " 10 ": 10 * time.Second, "-1": 0,
		"Wed, 21 Oct 2015 07:28:00 GMT": 0,
		// Found by FuzzWebhookResponse: seconds beyond a Duration
		// overflowed to a negative wait.
		"9227000000": 24 * time.Hour, "86401": 24 * time.Hour,
	} {
		if got := parseRetryAfter(in); got != want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestEncodeEnsureIsCanonical(t *testing.T) {
	ip := netip.MustParseAddr("2001:db8::10")
	n1 := Node{Name: "b", Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.1")}}
	n2 := Node{Name: "a"}
	web := model.ServiceKey{Namespace: "default", Name: "web"}
	api := model.ServiceKey{Namespace: "shop", Name: "api"}
	weight := map[string]int{"a": 3, "b": 1}
	got := string(encodeEnsure(ip, "a", []model.ServiceKey{api, web, api}, []Node{n1, n2}, func(n string) int { return weight[n] }))
	want := `{"address":"2001:db8::10","owner":"a","services":["default/web","shop/api"],` +
		`"nodes":[{"name":"a","addresses":[],"weight":3},{"name":"b","addresses":["10.0.0.1","10.0.0.2"],"weight":1}]}`
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("body (-want +got):\n%s", diff)
	}
	if got := addressPath(ip); got != "/v1/addresses/2001:db8::10" {
		t.Errorf("path %q", got)
	}
}

// FuzzWebhookResponse feeds arbitrary error bodies and Retry-After
// headers, what a webhook answers, to their decoders: they never panic,
// a wait is never negative, and the reason is empty or ": ..." with a
// body that is not a JSON error cut to 200 bytes.
func FuzzWebhookResponse(f *testing.F) {
	f.Add([]byte(`{"error":"address 192.0.2.1 is not in this account"}`), "5")
	f.Add([]byte(`{"error":""}`), "-1")
	f.Add([]byte("  upstream timed out\n"), "Wed, 21 Oct 2015 07:28:00 GMT")
	f.Add([]byte(strings.Repeat("x", 300)), "99999999999999999999")
	f.Add([]byte(`{"error":`), " 7 ")
	f.Add([]byte{}, "")
	f.Fuzz(func(t *testing.T, body []byte, retryAfter string) {
		if d := parseRetryAfter(retryAfter); d < 0 {
			t.Fatalf("parseRetryAfter(%q) = %s, negative", retryAfter, d)
		}
		r := reason(body)
		if r == "" {
			return
		}
		if !strings.HasPrefix(r, ": ") {
			t.Fatalf("reason(%q) = %q, want a \": \" prefix", body, r)
		}
		if utf8.Valid(body) && !strings.HasPrefix(strings.TrimSpace(string(body)), "{") && len(r) > len(": ")+200+len("...") {
			t.Fatalf("reason(%q) is %d bytes, want the body cut to 200", body, len(r))
		}
	})
}
