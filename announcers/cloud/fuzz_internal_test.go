package cloud

import (
	"strings"
	"testing"
	"unicode/utf8"
)

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
