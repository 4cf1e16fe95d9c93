package scenario_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/plugins/scenario"
)

const endpoints = "endpoints:\n- {address: 10.0.0.1, port: 80, node: a, zone: z}\n- {address: 10.0.0.2, port: 80}\n"

func TestParams(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"json string", `service: {params: '{"a": 1}'}`, `{"a": 1}`},
		{"flow object", `service: {params: {a: 1, b: [x, 2], c: {d: true}}}`, `{"a":1,"b":["x",2],"c":{"d":true}}`},
		{"block object", "service:\n  params:\n    zones: [a, b]\n    weight: 0.5\n", `{"weight":0.5,"zones":["a","b"]}`},
		{"none", `service: {name: x}`, ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc, err := scenario.Parse("s.yaml", []byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if got := string(sc.Input().Params); got != tc.want {
				t.Errorf("params %q, want %q", got, tc.want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown field", "service: {nme: x}\n", "scenario s.yaml, line 1: unknown field \"nme\" (the fields here are namespace, name, type, port, params)\n" +
			">  1 | service: {nme: x}\n                 ^\n"},
		{"unknown nested field", "endpoints:\n- address: 10.0.0.1\n  stats: {active: 1}\n",
			"line 3: unknown field \"active\" (the fields here are activeConns, inactiveConns, connRate, bytesInRate, bytesOutRate)"},
		{"unknown expectation", "expect: {weight: [1]}\n", "unknown field \"weight\" (the fields here are weights, shares, tolerance, scheduler, flags, reevaluate, decline)"},
		{"not a number", "endpoints:\n- address: 10.0.0.1\n  port: http\n",
			"scenario s.yaml, line 3: field port: \"http\" is not a whole number from 0 to 65535\n   1 | endpoints:\n   2 | - address: 10.0.0.1\n>  3 |   port: http\n               ^\n"},
		{"out of range", "endpoints: [{address: 10.0.0.1, port: 70000}]\n", "scenario s.yaml, line 1: field port: 70000 is out of range: want a whole number from 0 to 65535\n"},
		{"not a bool", "endpoints: [{address: 10.0.0.1, ready: maybe}]\n", `field ready: "maybe" is not true or false`},
		{"list for a mapping", "service:\n  port: [1]\n", "line 2: field port: a list was used where a mapping of fields is expected"},
		{"bad duration", "endpoints: [{address: 10.0.0.1, age: forever}]\n", `scenario s.yaml: "forever" is not a duration such as 30s or 1m30s`},
		{"bad json params", "service: {params: '{'}\n", "service.params is not valid JSON"},
		{"bad address", "endpoints: [{address: nope}]\n", `scenario s.yaml: endpoints[0].address "nope" is not an IPv4 or IPv6 address`},
		{"bad type", "service: {type: External}\n", `service.type "External": want ClusterIP, NodePort or LoadBalancer`},
		{"weights count", endpoints + "expect: {weights: [1]}\n", "expect: weights has 1 entries for 2 endpoints"},
		{"share range", endpoints + "expect: {shares: [1.5, 0]}\n", "expect: shares[0] is 1.5: a share is from 0 to 1"},
		{"decline and weights", endpoints + "expect: {decline: x, weights: [1, 1]}\n", "expect: decline excludes weights"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := scenario.Parse("s.yaml", []byte(tc.yaml))
			if err == nil {
				t.Fatalf("no error, want one containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want one containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "Go ") || strings.Contains(err.Error(), "uint") || strings.Contains(err.Error(), "Parse") {
				t.Errorf("error %q names Go types", err)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	tenS := 10 * time.Second
	decided := plugin.PolicyResult{Weights: []uint32{3, 1}, Scheduler: "mh", Flags: []string{"mh-port"}, Reevaluate: tenS}
	for _, tc := range []struct {
		name   string
		expect string
		res    plugin.PolicyResult
		err    error
		want   []string
	}{
		{"no expectations", "", decided, nil, nil},
		{"no expectations, failed", "", plugin.PolicyResult{}, errors.New("boom"), []string{"the policy failed: boom"}},
		{"exact", "{weights: [3, 1], scheduler: mh, flags: [mh-port], reevaluate: 10s}", decided, nil, nil},
		{"exact wrong", "{weights: [1, 1], scheduler: wrr, flags: [], reevaluate: 0s}", decided, nil, []string{
			"10.0.0.1:80 (a, z): weight 3, want 1", "scheduler mh, want wrr", "scheduler flags [mh-port], want []", "reevaluate 10s, want 0s"}},
		{"shares", "{shares: [0.75, 0.25]}", decided, nil, nil},
		{"shares within tolerance", "{shares: [0.7, 0.3], tolerance: 0.06}", decided, nil, nil},
		{"shares outside", "{shares: [0.7, 0.3]}", decided, nil, []string{
			"10.0.0.1:80 (a, z): share 0.750 (weight 3 of 4), want 0.7 ± 0.01", "10.0.0.2:80: share 0.250 (weight 1 of 4), want 0.3 ± 0.01"}},
		{"all drained", "{shares: [0, 0]}", plugin.PolicyResult{Weights: []uint32{0, 0}}, nil, nil},
		{"service's scheduler", "{scheduler: wrr}", plugin.PolicyResult{Weights: []uint32{1, 1}}, nil, []string{"scheduler (none: the Service's), want wrr"}},
		{"decline", "{decline: too few}", plugin.PolicyResult{}, errors.New("policy declined: too few endpoints"), nil},
		{"decline other", "{decline: too few}", plugin.PolicyResult{}, errors.New("policy trapped"), []string{`the policy failed with "policy trapped", want a decline with "too few"`}},
		{"decline but decided", "{decline: x}", decided, nil, []string{`the policy decided (weights [3 1]), want a decline with "x"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := endpoints
			if tc.expect != "" {
				src += "expect: " + tc.expect + "\n"
			}
			sc, err := scenario.Parse("s.yaml", []byte(src))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, sc.Check(tc.res, tc.err)); diff != "" {
				t.Errorf("Check (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRecordRewrite(t *testing.T) {
	res := plugin.PolicyResult{Weights: []uint32{3, 0}, Scheduler: "mh", Flags: []string{"mh-port"}, Reevaluate: 2 * time.Second}
	for _, tc := range []struct {
		name, src string
		res       plugin.PolicyResult
		err       error
		want      string
	}{
		{"appended", "# c\n" + endpoints, res, nil,
			"# c\n" + endpoints + "expect:\n  weights: [3, 0]\n  scheduler: mh\n  flags: [mh-port]\n  reevaluate: 2s\n"},
		{"replaced in the middle", "expect:\n  # old\n  weights: [1, 1]\n\n" + endpoints + "now: 2026-11-29T12:00:00Z", res, nil,
			endpoints + "now: 2026-11-29T12:00:00Z\nexpect:\n  weights: [3, 0]\n  scheduler: mh\n  flags: [mh-port]\n  reevaluate: 2s\n"},
		{"flow replaced", endpoints + "expect: {weights: [1, 1]}\n", plugin.PolicyResult{Weights: []uint32{1, 2}}, nil,
			endpoints + "expect:\n  weights: [1, 2]\n  reevaluate: 0s\n"},
		{"decline", endpoints, plugin.PolicyResult{}, errors.New(`policy declined: "x" is bad`), endpoints + "expect:\n  decline: \"policy declined: \\\"x\\\" is bad\"\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := string(scenario.Rewrite([]byte(tc.src), scenario.Record(tc.res, tc.err)))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Rewrite (-want +got):\n%s", diff)
			}
			sc, err := scenario.Parse("s.yaml", []byte(got))
			if err != nil {
				t.Fatalf("the rewritten file does not parse: %v", err)
			}
			if diffs := sc.Check(tc.res, tc.err); diffs != nil {
				t.Errorf("the recorded expectations do not match the decision they record: %v", diffs)
			}
		})
	}
}
