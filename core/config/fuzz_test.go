package config

import (
	"errors"
	"os"
	"testing"
)

// FuzzParse: Parse never panics on any file, returns a config or an
// Errors whose every entry says something, and a config it returns
// validates again.
func FuzzParse(f *testing.F) {
	full, err := os.ReadFile("testdata/full.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(full)
	f.Add([]byte(header))
	f.Add([]byte(header + "announcers:\n- {name: b, type: bgp, bgp: {asn: 1, peers: [{address: 10.0.0.1, asn: 2, bfd: {minRx: 5ms}}]}}\n"))
	f.Add([]byte(header + "pools: [{name: a, addresses: [192.0.2.1-192.0.2.9, \"2001:db8::/64\"]}]\n"))
	f.Add([]byte("---\n---\n"))
	f.Add([]byte("[1, 2"))
	f.Add([]byte(header + "dataplane: {ipvs: {syncPeriod: 1x}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if (c == nil) == (err == nil) {
			t.Fatalf("Parse = %v, %v: want exactly one of a config and an error", c, err)
		}
		if err != nil {
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("Parse error %v (%T) is not a non-empty Errors", err, err)
			}
			for _, e := range es {
				if e.Msg == "" {
					t.Fatalf("Parse error without a message: %+v", e)
				}
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("a parsed config does not validate again: %v", err)
		}
	})
}
