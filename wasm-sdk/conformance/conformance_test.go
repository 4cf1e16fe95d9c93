package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
	scenariofile "github.com/switchyard-lb/switchyard/plugins/scenario"
	"github.com/switchyard-lb/switchyard/plugins/wasm"
	"github.com/switchyard-lb/switchyard/wasm-sdk/conformance"
)

// Languages are the SDKs whose modules the suite runs, as directory names
// under $SWITCHYARD_WASM_DIR.
var languages = []string{"go", "rust", "assemblyscript"}

// runtime returns a host with every guard on and the modules' directory.
// It skips when SWITCHYARD_WASM_DIR is unset.
func runtime(t testing.TB) (*wasm.Runtime, string) {
	t.Helper()
	dir := os.Getenv("SWITCHYARD_WASM_DIR")
	if dir == "" {
		t.Skip("SWITCHYARD_WASM_DIR is unset: run `make wasm-conformance` to build every SDK's examples and run this suite")
	}
	ctx := context.Background()
	// The deadlines are wall-clock time and only bound failures: single
	// calls took up to ~100ms on a loaded machine, and a Go guest's
	// runtime start passed the default 1 s instantiation deadline at load
	// 30-40 (issue 9).
	r, err := wasm.NewRuntime(ctx, wasm.Config{
		CacheDir: filepath.Join(dir, ".wazero-cache"), Deadline: time.Minute, InstantiateDeadline: time.Minute,
		MemoryLimitPages: 512, MaxInstances: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(ctx) })
	return r, dir
}

// load loads $SWITCHYARD_WASM_DIR/<lang>/<name>.wasm, failing the test
// (without stopping it) when it is missing or refused.
func load(t testing.TB, r *wasm.Runtime, dir, lang, name string) *wasm.Policy {
	t.Helper()
	path := filepath.Join(dir, lang, name+".wasm")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("module %s/%s: %v", lang, name, err)
		return nil
	}
	p, err := r.Load(context.Background(), lang+"/"+name, b)
	if err != nil {
		t.Errorf("load %s: %v", path, err)
		return nil
	}
	return p
}

// policies loads every example of every language through the real host
// with every guard on, as policies[example][language]. It skips when
// SWITCHYARD_WASM_DIR is unset and fails when a module is missing.
func policies(t testing.TB) map[string]map[string]*wasm.Policy {
	t.Helper()
	r, dir := runtime(t)
	loaded := map[string]map[string]*wasm.Policy{}
	for _, ex := range conformance.Examples {
		loaded[ex] = map[string]*wasm.Policy{}
		for _, lang := range languages {
			loaded[ex][lang] = load(t, r, dir, lang, ex)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return loaded
}

var now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// unknownAge marks an endpoint whose first sighting is unknown.
const unknownAge = time.Duration(math.MinInt64)

// ep is a compact scenario endpoint. Zone "a" is the node's zone; the
// address defaults to 10.0.x.y from the endpoint's index.
type ep struct {
	zone, node                  string
	addr                        string
	ready, serving, terminating bool
	conns                       uint32
	age                         time.Duration
}

func scenario(params string, eps ...ep) *plugin.PolicyInput {
	in := &plugin.PolicyInput{
		Service: &model.Service{Key: model.ServiceKey{Namespace: "ns", Name: "web"}, Type: model.ClusterIP},
		Port:    model.ServicePort{Name: "http", Protocol: model.TCP, Port: 80},
		Node:    &model.Node{Name: "node-a1", Zone: "a"},
		Now:     now,
		Params:  []byte(params),
	}
	for i, e := range eps {
		addr := netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})
		if e.addr != "" {
			addr = netip.MustParseAddr(e.addr)
		}
		node := e.node
		if node == "" {
			node = "node-" + e.zone
		}
		pe := plugin.PolicyEndpoint{
			Endpoint: model.Endpoint{
				Addr: addr, Port: 8080, Protocol: model.TCP, NodeName: node, Zone: e.zone,
				Ready: e.ready, Serving: e.serving || e.ready, Terminating: e.terminating,
			},
			Local:    node == "node-a1",
			SameZone: e.zone == "a",
			Stats:    plugin.EndpointStats{ActiveConns: e.conns, InactiveConns: e.conns / 2, ConnRate: e.conns / 10},
		}
		if e.age != unknownAge {
			pe.FirstSeen = now.Add(-e.age)
		}
		in.Endpoints = append(in.Endpoints, pe)
	}
	// The host sorts endpoints by address; so do scenarios.
	sortEndpoints(in.Endpoints)
	return in
}

func sortEndpoints(eps []plugin.PolicyEndpoint) {
	for i := 1; i < len(eps); i++ {
		for j := i; j > 0 && eps[j].Addr.Less(eps[j-1].Addr); j-- {
			eps[j], eps[j-1] = eps[j-1], eps[j]
		}
	}
}

// many is n varied endpoints: three zones, some not ready, a spread of
// connections and ages (some unknown).
func many(n int) []ep {
	eps := make([]ep, n)
	for i := range eps {
		eps[i] = ep{
			zone: string(rune('a' + i%3)), ready: i%7 != 3, terminating: i%11 == 0, conns: uint32(i * 13 % 250),
			age: time.Duration(i*7919%120_000) * time.Millisecond,
		}
		if i%5 == 0 {
			eps[i].age = unknownAge
		}
	}
	return eps
}

type sc struct {
	name string
	in   *plugin.PolicyInput
}

// shared are endpoint sets every example runs on, with its params.
func shared(params string) []sc {
	return []sc{
		{"no endpoints", scenario(params)},
		{"nothing usable", scenario(params, ep{zone: "a"}, ep{zone: "b", terminating: true})},
		{"terminating fallback", scenario(params, ep{zone: "a", serving: true, terminating: true, conns: 3, age: time.Second},
			ep{zone: "b", serving: true, terminating: true, age: unknownAge}, ep{zone: "a"})},
		{"IPv6 and IPv4", scenario(params, ep{zone: "a", ready: true, addr: "2001:db8::1", conns: 4}, ep{zone: "b", ready: true, addr: "10.0.1.7", age: time.Hour})},
		{"bad params: not an object", scenario(`[1]`, ep{zone: "a", ready: true})},
		{"bad params: garbage", scenario(`{"x"`, ep{zone: "a", ready: true})},
		{"50 endpoints", scenario(params, many(50)...)},
		{"1000 endpoints", scenario(params, many(1000)...)},
		// The ABI's maximum: the guests' buffers must grow.
		{"10000 endpoints", scenario(params, many(10000)...)},
		{"back to 3 endpoints", scenario(params, many(3)...)},
	}
}

var scenarios = map[string][]sc{
	"zoneaware": append(shared(`{"spillAt": 60}`),
		sc{"all in zone", scenario("", ep{zone: "a", ready: true}, ep{zone: "a", ready: true})},
		sc{"zone quiet: others drained", scenario("", ep{zone: "a", ready: true, conns: 10}, ep{zone: "b", ready: true}, ep{zone: "c", ready: true})},
		sc{"zone busy: spill", scenario("", ep{zone: "a", ready: true, conns: 150}, ep{zone: "a", ready: true, conns: 50}, ep{zone: "b", ready: true})},
		sc{"zone just under the threshold", scenario("", ep{zone: "a", ready: true, conns: 150}, ep{zone: "a", ready: true, conns: 49}, ep{zone: "b", ready: true})},
		sc{"nothing in zone: everyone", scenario("", ep{zone: "b", ready: true}, ep{zone: "c", ready: true}, ep{zone: "c"})},
		sc{"in-zone endpoint not ready", scenario("", ep{zone: "a"}, ep{zone: "b", ready: true})},
		sc{"zero spill weight", scenario(`{"spillAt": 0, "spillWeight": 0}`, ep{zone: "a", ready: true}, ep{zone: "b", ready: true})},
		sc{"params", scenario(`{"spillAt": 5, "localWeight": 3, "spillWeight": 1, "note": "x"}`, ep{zone: "a", ready: true, conns: 5}, ep{zone: "b", ready: true})},
		sc{"weights capped", scenario(`{"localWeight": 100000}`, ep{zone: "a", ready: true})},
		sc{"bad params: fraction", scenario(`{"spillAt": 1.5}`, ep{zone: "a", ready: true})},
		sc{"bad params: negative", scenario(`{"localWeight": -1}`, ep{zone: "a", ready: true})},
	),
	"canary": append(shared(`{"canary": "zone=b", "percent": 20}`),
		sc{"zone canary 10% default", scenario(`{"canary": "zone=b"}`,
			ep{zone: "a", ready: true}, ep{zone: "a", ready: true}, ep{zone: "b", ready: true}, ep{zone: "c", ready: true})},
		sc{"node canary", scenario(`{"canary": "node=n7", "percent": 50}`,
			ep{zone: "a", node: "n7", ready: true}, ep{zone: "a", node: "n7", ready: true}, ep{zone: "b", node: "n8", ready: true})},
		sc{"cidr canary, host bits set", scenario(`{"percent": 30, "canary": "cidr=10.0.0.3/31"}`,
			ep{zone: "a", ready: true}, ep{zone: "a", ready: true}, ep{zone: "a", ready: true}, ep{zone: "a", ready: true}, ep{zone: "b", ready: true, addr: "2001:db8::2"})},
		sc{"cidr /0 matches every IPv4", scenario(`{"canary": "cidr=0.0.0.0/0", "percent": 1}`,
			ep{zone: "a", ready: true}, ep{zone: "a", ready: true, addr: "2001:db8::2"})},
		sc{"cidr /32", scenario(`{"canary": "cidr=10.0.0.1/32", "percent": 99}`,
			ep{zone: "a", ready: true}, ep{zone: "a", ready: true}, ep{zone: "b", ready: true})},
		sc{"percent 0 drains canaries", scenario(`{"canary": "zone=b", "percent": 0}`, ep{zone: "a", ready: true}, ep{zone: "b", ready: true})},
		sc{"percent 100 drains the rest", scenario(`{"canary": "zone=b", "percent": 100}`, ep{zone: "a", ready: true}, ep{zone: "b", ready: true})},
		sc{"only canaries: no split", scenario(`{"canary": "zone=b"}`, ep{zone: "b", ready: true}, ep{zone: "b", ready: true})},
		sc{"canary not usable: no split", scenario(`{"canary": "zone=b"}`, ep{zone: "a", ready: true}, ep{zone: "b"})},
		sc{"many canaries: at least 1", scenario(`{"canary": "zone=a", "percent": 1}`, many(300)...)},
		sc{"bad params: no canary", scenario(`{"percent": 5}`, ep{zone: "a", ready: true})},
		sc{"bad params: unknown selector", scenario(`{"canary": "label=x"}`, ep{zone: "a", ready: true})},
		sc{"bad params: selector without =", scenario(`{"canary": "zone"}`, ep{zone: "a", ready: true})},
		sc{"bad params: percent above 100", scenario(`{"canary": "zone=b", "percent": 101}`, ep{zone: "a", ready: true})},
		sc{"bad params: canary not a string", scenario(`{"canary": 5}`, ep{zone: "a", ready: true})},
		sc{"bad params: escape", scenario(`{"canary": "zone=\u0062"}`, ep{zone: "a", ready: true})},
		sc{"bad params: cidr leading zero", scenario(`{"canary": "cidr=10.0.0.01/24"}`, ep{zone: "a", ready: true})},
		sc{"bad params: cidr length", scenario(`{"canary": "cidr=10.0.0.0/33"}`, ep{zone: "a", ready: true})},
		sc{"bad params: cidr octet", scenario(`{"canary": "cidr=10.0.256.0/24"}`, ep{zone: "a", ready: true})},
		sc{"bad params: cidr trailing", scenario(`{"canary": "cidr=10.0.0.0/24x"}`, ep{zone: "a", ready: true})},
		sc{"bad params: cidr short", scenario(`{"canary": "cidr=10.0.0/24"}`, ep{zone: "a", ready: true})},
	),
	"leastconn": append(shared(""),
		sc{"inverse to connections", scenario("", ep{zone: "a", ready: true}, ep{zone: "b", ready: true, conns: 1},
			ep{zone: "c", ready: true, conns: 9}, ep{zone: "c", ready: true, conns: math.MaxUint32})},
		sc{"scale", scenario(`{"scale": 100}`, ep{zone: "a", ready: true, conns: 3}, ep{zone: "b", ready: true, conns: 1000})},
		sc{"scale capped", scenario(`{"scale": 4294967295}`, ep{zone: "a", ready: true}, ep{zone: "b", ready: true, conns: 1})},
		sc{"scale 0 drains", scenario(`{"scale": 0}`, ep{zone: "a", ready: true}, ep{zone: "b", ready: true, conns: 1})},
		sc{"bad params: scale too big", scenario(`{"scale": 4294967296}`, ep{zone: "a", ready: true})},
		sc{"bad params: scale exponent", scenario(`{"scale": 1e3}`, ep{zone: "a", ready: true})},
		sc{"bad params: scale leading zero", scenario(`{"scale": 010}`, ep{zone: "a", ready: true})},
	),
	"slowstart": append(shared(`{"windowSec": 90}`),
		sc{"ramp", scenario(`{"windowSec": 60, "weight": 1000}`,
			ep{zone: "a", ready: true, age: 0}, ep{zone: "a", ready: true, age: 999 * time.Microsecond},
			ep{zone: "a", ready: true, age: 15 * time.Second}, ep{zone: "b", ready: true, age: 59999 * time.Millisecond},
			ep{zone: "b", ready: true, age: time.Minute}, ep{zone: "c", ready: true, age: unknownAge})},
		sc{"first seen in the future", scenario("", ep{zone: "a", ready: true, age: -time.Hour}, ep{zone: "a", ready: true, age: time.Hour})},
		sc{"all old: no re-evaluation", scenario("", ep{zone: "a", ready: true, age: time.Hour}, ep{zone: "a", ready: true, age: unknownAge})},
		sc{"window 0: full weight", scenario(`{"windowSec": 0}`, ep{zone: "a", ready: true, age: 0})},
		sc{"weight 0", scenario(`{"weight": 0}`, ep{zone: "a", ready: true, age: time.Second})},
		sc{"weight capped, huge window", scenario(`{"weight": 99999999, "windowSec": 4294967295}`, ep{zone: "a", ready: true, age: 1000 * time.Hour})},
		sc{"bad params: window string", scenario(`{"windowSec": "60"}`, ep{zone: "a", ready: true})},
	),
}

func TestExamplesConform(t *testing.T) {
	loaded := policies(t)
	ctx := context.Background()
	for _, ex := range conformance.Examples {
		ref := conformance.References[ex]
		for _, s := range scenarios[ex] {
			t.Run(ex+"/"+s.name, func(t *testing.T) {
				want, wantErr := ref(s.in)
				got := map[string]plugin.PolicyResult{}
				for _, lang := range languages {
					res, err := loaded[ex][lang].Evaluate(ctx, s.in)
					if wantErr != nil {
						if !errors.Is(err, wasm.ErrDeclined) || !strings.Contains(err.Error(), "params: ") {
							t.Errorf("%s: got %v; the reference failed (%v): want a decline saying params: why", lang, err, wantErr)
						}
						continue
					}
					if err != nil {
						t.Errorf("%s: %v", lang, err)
						continue
					}
					got[lang] = res
					if diff := cmp.Diff(want, res); diff != "" {
						t.Errorf("%s differs from the reference (-reference +%s):\n%s", lang, lang, diff)
					}
				}
				// Identical across languages, not only each equal to the
				// reference.
				for _, lang := range languages[1:] {
					a, okA := got[languages[0]]
					b, okB := got[lang]
					if okA && okB {
						if diff := cmp.Diff(a, b); diff != "" {
							t.Errorf("%s and %s differ (-%s +%s):\n%s", languages[0], lang, languages[0], lang, diff)
						}
					}
				}
			})
		}
	}
}

// TestScenariosExercise guards the scenarios themselves: each example
// must see declines, drained usable endpoints and at least two distinct
// non-zero weights in one decision, or conforming proves little;
// zoneaware's must also spill out of the zone and fall back to
// terminating endpoints.
func TestScenariosExercise(t *testing.T) {
	for _, ex := range conformance.Examples {
		var declined, drained, spread, spill, terminating bool
		for _, s := range scenarios[ex] {
			res, err := conformance.References[ex](s.in)
			if err != nil {
				declined = true
				continue
			}
			distinct := map[uint32]bool{}
			for i, w := range res.Weights {
				e := s.in.Endpoints[i]
				if w == 0 && e.Ready {
					drained = true
				}
				if w > 0 {
					distinct[w] = true
					spill = spill || (!e.SameZone && w < 100)
					terminating = terminating || e.Terminating
				}
			}
			spread = spread || len(distinct) >= 2
		}
		if !declined || !drained || !spread {
			t.Errorf("%s: declined %v, drained a usable endpoint %v, two distinct weights %v: want all", ex, declined, drained, spread)
		}
		if ex == "zoneaware" && (!spill || !terminating) {
			t.Errorf("%s: spilled out of the zone %v, weighted a terminating endpoint %v: want both", ex, spill, terminating)
		}
	}
}

// TestReferences pins a few reference decisions by hand, so that a
// reference bug that every SDK copied would still be caught.
func TestReferences(t *testing.T) {
	tests := []struct {
		example string
		in      *plugin.PolicyInput
		want    []uint32
	}{
		{"zoneaware", scenario("", ep{zone: "a", ready: true, conns: 200}, ep{zone: "b", ready: true}), []uint32{100, 10}},
		{"canary", scenario(`{"canary": "zone=b", "percent": 10}`, ep{zone: "a", ready: true}, ep{zone: "a", ready: true}, ep{zone: "b", ready: true}), []uint32{4500, 4500, 1000}},
		{"canary", scenario(`{"canary": "cidr=10.0.0.0/31", "percent": 25}`, ep{zone: "a", ready: true}, ep{zone: "a", ready: true}, ep{zone: "a", ready: true}), []uint32{1250, 1250, 7500}},
		{"leastconn", scenario("", ep{zone: "a", ready: true}, ep{zone: "a", ready: true, conns: 3}, ep{zone: "a", ready: true, conns: 20000}, ep{zone: "a"}), []uint32{10000, 2500, 1, 0}},
		{"slowstart", scenario("", ep{zone: "a", ready: true, age: 30 * time.Second}, ep{zone: "a", ready: true, age: 2 * time.Minute}, ep{zone: "a", ready: true, age: 100 * time.Microsecond}), []uint32{50, 100, 1}},
	}
	for _, tt := range tests {
		res, err := conformance.References[tt.example](tt.in)
		if err != nil {
			t.Errorf("%s: %v", tt.example, err)
			continue
		}
		if diff := cmp.Diff(tt.want, res.Weights); diff != "" {
			t.Errorf("%s weights (-want +got):\n%s", tt.example, diff)
		}
	}
}

func BenchmarkExamples(b *testing.B) {
	loaded := policies(b)
	ctx := context.Background()
	params := map[string]string{"canary": `{"canary": "zone=b", "percent": 20}`}
	for _, ex := range conformance.Examples {
		for _, n := range []int{50, 1000} {
			in := scenario(params[ex], many(n)...)
			for _, lang := range languages {
				b.Run(fmt.Sprintf("%s/%s/endpoints=%d", ex, lang, n), func(b *testing.B) {
					p := loaded[ex][lang]
					for b.Loop() {
						if _, err := p.Evaluate(ctx, in); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
			b.Run(fmt.Sprintf("%s/native/endpoints=%d", ex, n), func(b *testing.B) {
				for b.Loop() {
					conformance.References[ex](in)
				}
			})
		}
	}
}

// examplesOf lists the examples of one SDK language: the directories
// with a main.go (Go) or the files with the extension ext.
func examplesOf(t *testing.T, dir, ext string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if ext == "" {
			if _, err := os.Stat(filepath.Join(dir, e.Name(), "main.go")); e.IsDir() && err == nil {
				names = append(names, e.Name())
			}
		} else if name, ok := strings.CutSuffix(e.Name(), ext); ok && !e.IsDir() {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// TestEveryExampleHasScenarios: the three SDKs ship the same examples,
// and each has scenarios in wasm-sdk/scenarios/<example>, every one with
// expectations, which make wasm-scenarios (in make test) checks against
// the module of every language.
func TestEveryExampleHasScenarios(t *testing.T) {
	goExamples := examplesOf(t, "../go/examples", "")
	if len(goExamples) == 0 {
		t.Fatal("no Go examples in wasm-sdk/go/examples")
	}
	for lang, got := range map[string][]string{
		"rust":           examplesOf(t, "../rust/examples", ".rs"),
		"assemblyscript": examplesOf(t, "../assemblyscript/examples", ".ts"),
	} {
		if diff := cmp.Diff(goExamples, got); diff != "" {
			t.Errorf("%s's examples differ from Go's (-go +%s):\n%s", lang, lang, diff)
		}
	}
	for _, name := range goExamples {
		files, err := filepath.Glob(filepath.Join("../scenarios", name, "*.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if len(files) == 0 {
			t.Errorf("example %s has no scenarios in wasm-sdk/scenarios/%s", name, name)
		}
		for _, f := range files {
			sc, err := scenariofile.Load(f)
			if err != nil {
				t.Error(err)
			} else if sc.Expect == nil {
				t.Errorf("%s has no expect section: it checks nothing", f)
			}
		}
	}
}

// TestREADMEScenario: the scenario wasm-sdk/README.md shows is one of the
// zoneaware example's, which make wasm-scenarios checks in every
// language, word for word.
func TestREADMEScenario(t *testing.T) {
	page, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	sc, err := os.ReadFile("../scenarios/zoneaware/readme.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), "```yaml\n"+string(sc)+"```\n") {
		t.Errorf("wasm-sdk/README.md does not show wasm-sdk/scenarios/zoneaware/readme.yaml as a yaml block word for word:\n%s", sc)
	}
}
