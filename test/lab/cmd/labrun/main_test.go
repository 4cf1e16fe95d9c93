package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/switchyard-lb/switchyard/test/lab"
)

func TestTimeoutFor(t *testing.T) {
	tests := []struct {
		args []string
		want time.Duration
	}{
		{args: nil, want: lab.DefaultTimeout},
		{args: []string{"-test.v=true", "-test.timeout=10m0s"}, want: 11 * time.Minute},
		{args: []string{"-test.timeout=30s", "-test.run=X"}, want: 90 * time.Second},
		{args: []string{"-test.timeout=0s"}, want: lab.DefaultTimeout}, // go test -timeout 0: no limit of its own
		{args: []string{"-test.timeout=bogus"}, want: lab.DefaultTimeout},
	}
	for _, tc := range tests {
		if got := timeoutFor(tc.args); got != tc.want {
			t.Errorf("timeoutFor(%q) = %s, want %s", tc.args, got, tc.want)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{name: "no command", args: nil},
		{name: "bad flag", args: []string{"run", "-nosuchflag"}},
		{name: "bad env", args: []string{"run", "-env", "NOEQUALS", "bin"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			if code := run(context.Background(), tc.args, &bytes.Buffer{}, &stderr); code != 2 {
				t.Errorf("exit code = %d, want 2 (stderr: %s)", code, stderr.String())
			}
		})
	}
}

func TestListFlag(t *testing.T) {
	var l listFlag
	for _, v := range []string{"/usr/sbin/ipset,/usr/sbin/nft", " xt_set , ", "/usr/lib/x86_64-linux-gnu/xtables"} {
		if err := l.Set(v); err != nil {
			t.Fatal(err)
		}
	}
	want := listFlag{"/usr/sbin/ipset", "/usr/sbin/nft", "xt_set", "/usr/lib/x86_64-linux-gnu/xtables"}
	if diff := cmp.Diff(want, l); diff != "" {
		t.Errorf("listFlag (-want +got):\n%s", diff)
	}
}
