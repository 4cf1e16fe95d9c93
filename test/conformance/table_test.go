package conformance

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestTable(t *testing.T) {
	const (
		basic    = "[sig-network] Services should serve a basic endpoint from pods [Conformance]"
		nodePort = "[sig-network] Services should be able to create a functioning NodePort service [Conformance]"
		twoNodes = "[sig-network] Services should work after the service has been recreated"
		flaky    = "[sig-network] Services should be flaky [Flaky]"
		storage  = "[sig-storage] Volumes should store data"
		upDown   = "[sig-network] Services should be able to up and down services"
	)
	f, err := NewFilter(`\[sig-network\] Services`, `\[Flaky\]`)
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string][]Result{
		KubeProxyNFTables: {
			{Spec: basic, Outcome: Pass, Duration: 34 * time.Second},
			{Spec: nodePort, Outcome: Pass, Duration: 40 * time.Second},
			{Spec: twoNodes, Outcome: Skip, Reason: "Requires at least 2 nodes (not 1)"},
			{Spec: flaky, Outcome: Fail, Reason: "not selected"},
			{Spec: storage, Outcome: Pass},
			{Spec: "[SynchronizedBeforeSuite]", Setup: true, Outcome: Pass},
		},
		KubeProxyIPVS: {
			{Spec: "[SynchronizedBeforeSuite]", Setup: true, Outcome: Fail, Reason: "no nodes", Duration: time.Second},
			{Spec: basic, Outcome: Skip},
		},
		Switchyard: {
			{Spec: basic, Outcome: Pass, Duration: 31 * time.Second},
			{Spec: nodePort, Outcome: Fail, Reason: "unreachable | twice", Duration: 95 * time.Second},
			// Filtered out by that run's own focus: not run.
			{Spec: twoNodes, Outcome: Skip},
			{Spec: upDown, Outcome: Interrupted, Duration: 220 * time.Second},
		},
	}
	want := `| spec | kube-proxy IPVS | kube-proxy nftables | Switchyard |
|---|---|---|---|
| [SynchronizedBeforeSuite] | FAIL (1s): no nodes | not run | not run |
| [sig-network] Services should be able to create a functioning NodePort service [Conformance] | not run | pass (40s) | FAIL (1m35s): unreachable \| twice |
| [sig-network] Services should be able to up and down services | not run | not run | stopped by hand after 3m40s |
| [sig-network] Services should serve a basic endpoint from pods [Conformance] | not run | pass (34s) | pass (31s) |
| [sig-network] Services should work after the service has been recreated | not run | skip: Requires at least 2 nodes (not 1) | not run |
| **total** (pass/fail/skip) | 0/1/0 | 2/0/1 | 1/1/0, 1 stopped |
`
	if diff := cmp.Diff(want, Table(runs, f)); diff != "" {
		t.Errorf("Table (-want +got):\n%s", diff)
	}
}

func TestNewFilterRefusesBadRegexp(t *testing.T) {
	if _, err := NewFilter(`[`, ""); err == nil {
		t.Error("NewFilter(`[`): no error")
	}
	if _, err := NewFilter(`x`, `(`); err == nil {
		t.Error("NewFilter skip `(`: no error")
	}
}

func TestMerge(t *testing.T) {
	const (
		a = "[sig-network] Services a"
		b = "[sig-network] Services b"
		c = "[sig-network] Services c"
		d = "[sig-network] Services d"
	)
	chunk1 := map[string][]Result{
		Switchyard: {
			{Spec: a, Outcome: Pass, Duration: time.Second},
			{Spec: b, Outcome: Skip}, // not selected by chunk 1
			{Spec: c, Outcome: Fail, Reason: "first try"},
			{Spec: d, Outcome: Pass},
		},
		KubeProxyNFTables: {{Spec: a, Outcome: Pass}},
	}
	chunk2 := map[string][]Result{
		Switchyard: {
			{Spec: a, Outcome: Skip}, // not selected by chunk 2: chunk 1's pass stays
			{Spec: b, Outcome: Skip, Reason: "Requires at least 2 nodes"},
			{Spec: c, Outcome: Pass, Duration: 2 * time.Second}, // rerun: the last one counts
			{Spec: d, Outcome: Interrupted},                     // stopped: chunk 1's pass stays
		},
		KubeProxyIPVS: {{Spec: b, Outcome: Skip}},
	}
	want := map[string][]Result{
		Switchyard: {
			{Spec: a, Outcome: Pass, Duration: time.Second},
			{Spec: b, Outcome: Skip, Reason: "Requires at least 2 nodes"},
			{Spec: c, Outcome: Pass, Duration: 2 * time.Second},
			{Spec: d, Outcome: Pass},
		},
		KubeProxyNFTables: {{Spec: a, Outcome: Pass}},
		KubeProxyIPVS:     {{Spec: b, Outcome: Skip}},
	}
	if diff := cmp.Diff(want, Merge(chunk1, chunk2)); diff != "" {
		t.Errorf("Merge (-want +got):\n%s", diff)
	}
}
