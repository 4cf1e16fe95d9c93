// Package examples_test is the conformance suite of the Go SDK's example
// policies: each example module, built from source and run by the real
// host with every guard on, must decide exactly as a native Go reference
// on the same scenarios.
package examples_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/plugins/wasm"
	"github.com/switchyard-lb/switchyard/plugins/wasm/wasmtest"
)

var zoneAware []byte

func TestMain(m *testing.M) {
	root, err := filepath.Abs("../../..")
	if err == nil {
		zoneAware, err = wasmtest.BuildGo(root, filepath.Join(root, "wasm-sdk/go/examples/zoneaware"),
			filepath.Join(root, "wasm-sdk/go/policy"))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "build example policies:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// zoneAwareReference is the native Go statement of the zoneaware example
// (see its package comment), written independently of the SDK.
func zoneAwareReference(in *plugin.PolicyInput) (plugin.PolicyResult, error) {
	params := struct {
		SpillAt     *uint32 `json:"spillAt"`
		LocalWeight *uint32 `json:"localWeight"`
		SpillWeight *uint32 `json:"spillWeight"`
	}{}
	if len(in.Params) > 0 {
		if err := json.Unmarshal(in.Params, &params); err != nil {
			return plugin.PolicyResult{}, err
		}
	}
	get := func(p *uint32, def uint32) uint64 {
		if p == nil {
			return uint64(def)
		}
		return uint64(*p)
	}
	spillAt, local, spill := get(params.SpillAt, 100), get(params.LocalWeight, 100), get(params.SpillWeight, 10)

	usable := make([]bool, len(in.Endpoints))
	ready := false
	for _, ep := range in.Endpoints {
		ready = ready || ep.Ready
	}
	var inZone, conns uint64
	for i, ep := range in.Endpoints {
		usable[i] = ep.Ready || (!ready && ep.Serving && ep.Terminating)
		if usable[i] && ep.SameZone {
			inZone++
			conns += uint64(ep.Stats.ActiveConns)
		}
	}
	w := make([]uint32, len(in.Endpoints))
	for i, ep := range in.Endpoints {
		switch {
		case !usable[i]:
		case inZone == 0 || ep.SameZone:
			w[i] = uint32(min(local, 65535))
		case conns >= spillAt*inZone:
			w[i] = uint32(min(spill, 65535))
		}
	}
	return plugin.PolicyResult{Weights: w, Scheduler: "wrr", Reevaluate: 10 * time.Second}, nil
}

// ep is a compact scenario endpoint: zone "a" is the node's zone.
type ep struct {
	zone                        string
	ready, serving, terminating bool
	conns                       uint32
}

func scenario(params string, eps ...ep) *plugin.PolicyInput {
	in := &plugin.PolicyInput{
		Service: &model.Service{Key: model.ServiceKey{Namespace: "ns", Name: "web"}, Type: model.ClusterIP},
		Port:    model.ServicePort{Name: "http", Protocol: model.TCP, Port: 80},
		Node:    &model.Node{Name: "node-a1", Zone: "a"},
		Now:     time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC),
		Params:  []byte(params),
	}
	for i, e := range eps {
		in.Endpoints = append(in.Endpoints, plugin.PolicyEndpoint{
			Endpoint: model.Endpoint{
				Addr: netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), Port: 8080, Protocol: model.TCP,
				NodeName: "node-" + e.zone, Zone: e.zone,
				Ready: e.ready, Serving: e.serving || e.ready, Terminating: e.terminating,
			},
			SameZone: e.zone == "a",
			Stats:    plugin.EndpointStats{ActiveConns: e.conns},
		})
	}
	return in
}

func many(n int) []ep {
	eps := make([]ep, n)
	for i := range eps {
		eps[i] = ep{zone: string(rune('a' + i%3)), ready: i%7 != 3, conns: uint32(i * 13 % 250)}
	}
	return eps
}

var scenarios = []struct {
	name string
	in   *plugin.PolicyInput
}{
	{"no endpoints", scenario("")},
	{"all in zone", scenario("", ep{zone: "a", ready: true}, ep{zone: "a", ready: true})},
	{"zone quiet: others drained", scenario("", ep{zone: "a", ready: true, conns: 10}, ep{zone: "b", ready: true}, ep{zone: "c", ready: true})},
	{"zone busy: spill", scenario("", ep{zone: "a", ready: true, conns: 150}, ep{zone: "a", ready: true, conns: 50}, ep{zone: "b", ready: true})},
	{"zone just under the threshold", scenario("", ep{zone: "a", ready: true, conns: 150}, ep{zone: "a", ready: true, conns: 49}, ep{zone: "b", ready: true})},
	{"nothing in zone: everyone", scenario("", ep{zone: "b", ready: true}, ep{zone: "c", ready: true}, ep{zone: "c"})},
	{"in-zone endpoint not ready", scenario("", ep{zone: "a"}, ep{zone: "b", ready: true})},
	{"terminating fallback", scenario("", ep{zone: "a", serving: true, terminating: true}, ep{zone: "b", serving: true, terminating: true}, ep{zone: "a"})},
	{"nothing usable", scenario("", ep{zone: "a"}, ep{zone: "b", terminating: true})},
	{"params", scenario(`{"spillAt": 5, "localWeight": 3, "spillWeight": 1, "note": "x"}`, ep{zone: "a", ready: true, conns: 5}, ep{zone: "b", ready: true})},
	{"weights capped", scenario(`{"localWeight": 100000}`, ep{zone: "a", ready: true})},
	{"zero spill weight", scenario(`{"spillAt": 0, "spillWeight": 0}`, ep{zone: "a", ready: true}, ep{zone: "b", ready: true})},
	{"bad params: not an object", scenario(`[1]`, ep{zone: "a", ready: true})},
	{"bad params: fraction", scenario(`{"spillAt": 1.5}`, ep{zone: "a", ready: true})},
	{"bad params: negative", scenario(`{"localWeight": -1}`, ep{zone: "a", ready: true})},
	{"50 endpoints", scenario("", many(50)...)},
	{"1000 endpoints", scenario(`{"spillAt": 60}`, many(1000)...)},
}

func load(t testing.TB) *wasm.Policy {
	t.Helper()
	ctx := context.Background()
	cache, err := wasmtest.CacheDir()
	if err != nil {
		t.Fatal(err)
	}
	// Every guard on: deadline, memory cap, instance pool. The deadline
	// is wall-clock time; on a loaded test machine single calls took up
	// to ~100ms, so it is generous here.
	r, err := wasm.NewRuntime(ctx, wasm.Config{
		CacheDir: filepath.Join(cache, "wazero"), Deadline: time.Second, MemoryLimitPages: 512, MaxInstances: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(ctx) })
	p, err := r.Load(ctx, "zoneaware", zoneAware)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestZoneAwareConformance(t *testing.T) {
	p := load(t)
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			want, wantErr := zoneAwareReference(sc.in)
			got, err := p.Evaluate(context.Background(), sc.in)
			if wantErr != nil {
				if !errors.Is(err, wasm.ErrDeclined) || !strings.Contains(err.Error(), "params: ") {
					t.Errorf("module: %v; reference failed (%v), want the module to decline, saying why", err, wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("module: %v", err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("module differs from the reference (-reference +module):\n%s", diff)
			}
		})
	}
}

// TestZoneAwareScenariosExercised guards the scenarios themselves: they
// must cover spill-over, draining and the fallbacks, or the conformance
// test proves little.
func TestZoneAwareScenariosExercised(t *testing.T) {
	seen := map[string]bool{}
	for _, sc := range scenarios {
		res, err := zoneAwareReference(sc.in)
		if err != nil {
			seen["error"] = true
			continue
		}
		for i, w := range res.Weights {
			ep := sc.in.Endpoints[i]
			switch {
			case w == 0 && ep.Ready:
				seen["drained ready"] = true
			case w > 0 && !ep.SameZone && w < 100:
				seen["spill"] = true
			case w > 0 && ep.Terminating:
				seen["terminating"] = true
			}
		}
	}
	for _, k := range []string{"error", "drained ready", "spill", "terminating"} {
		if !seen[k] {
			t.Errorf("no scenario exercises %q", k)
		}
	}
}

func BenchmarkZoneAware(b *testing.B) {
	for _, n := range []int{50, 1000} {
		in := scenario("", many(n)...)
		b.Run(fmt.Sprintf("wasm/endpoints=%d", n), func(b *testing.B) {
			p := load(b)
			ctx := context.Background()
			for b.Loop() {
				if _, err := p.Evaluate(ctx, in); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("native/endpoints=%d", n), func(b *testing.B) {
			for b.Loop() {
				zoneAwareReference(in)
			}
		})
	}
}
