//go:build linux

package labtest

import (
	"context"
	"fmt"
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
	"github.com/switchyard-lb/switchyard/core/plugin/plugintest"
	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/plugins/wasm"
)

// The WebAssembly modules TestWasmPolicyWeightsDriveTraffic loads from
// testdata/. `make test-lab` builds them from source first (test/lab/lab.mk):
// the canary and leastconn examples of the Rust SDK and testdata/hostile.rs.
var labModules = []string{"canary", "leastconn", "hostile"}

// readModule reads testdata/<name>.wasm. In the guest a missing module is
// a failure: `make test-lab` always builds them.
func readModule(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name+".wasm"))
	if err != nil {
		t.Fatalf("policy module %s: %v (make test-lab builds it from source into ipvs/labtest/testdata)", name, err)
	}
	return b
}

// requireCompilerCPU fails the test unless the guest CPU lets wazero
// compile, as on any production node, so that the test exercises the
// engine the daemon runs. wazero's compiler needs SSE4.1, and the code it
// generates for these modules uses POPCNT: qemu's default TCG model
// (qemu64) has neither. plugins/wasm asks for the compiler whatever the
// CPU, so there the guest dies of SIGILL at the first evaluation. The lab
// has to boot with qemu -cpu max.
func requireCompilerCPU(t *testing.T) {
	t.Helper()
	info, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Fatal(err)
	}
	var flags []string
	for line := range strings.Lines(string(info)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "flags" {
			flags = strings.Fields(v)
			break
		}
	}
	var missing []string
	for _, f := range []string{"popcnt", "sse4_1"} {
		if !slices.Contains(flags, f) {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("the guest CPU lacks %v, which wazero's compiler and the code it generates need: boot the lab with qemu -cpu max", missing)
	}
}

// memAvailable is the guest's MemAvailable in MiB, for the log.
func memAvailable() string {
	info, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return err.Error()
	}
	for line := range strings.Lines(string(info)) {
		if v, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			var kb int
			fmt.Sscan(v, &kb)
			return fmt.Sprintf("%d MiB", kb/1024)
		}
	}
	return "unknown"
}

// TestWasmPolicyWeightsDriveTraffic runs the reconcile loop on the guest's
// kernel with WebAssembly policies loaded by the real host (plugins/wasm,
// with its deadline, memory cap and instance recycling), compiled by
// wazero inside the guest:
//
//   - the canary example (20% to node-be1's endpoint) gives weights
//     2000/4000/4000, which IPVS holds and real traffic splits exactly
//     1:2:2;
//   - a module that never returns and one that traps leave their Services
//     on uniform weights, reported as DeadlineExceeded and Trapped,
//     without touching the canary Service;
//   - five held connections (1/2/2 per backend) reach the leastconn
//     example as live IPVS statistics once the Service switches to it:
//     600/(1+active) gives 300/200/200, which IPVS holds and traffic
//     splits 3:2:2.
func TestWasmPolicyWeightsDriveTraffic(t *testing.T) {
	requireGuest(t)
	requireCompilerCPU(t)
	clearPlan(t)
	modules := map[string][]byte{}
	for _, name := range labModules {
		modules[name] = readModule(t, name)
	}
	ctx := t.Context()

	// Generous deadlines that only bound failures: TCG runs the guest's
	// code 10-50x slower than the host, and a loaded host stalls the
	// guest for seconds (issue 9). The hostile module has a runtime of its
	// own with a short deadline, which its loop costs once per evaluation.
	newRuntime := func(deadline time.Duration) *wasm.Runtime {
		rt, err := wasm.NewRuntime(ctx, wasm.Config{Deadline: deadline, InstantiateDeadline: 2 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rt.Close(context.Background()) })
		return rt
	}
	rt, hostileRT := newRuntime(time.Minute), newRuntime(time.Second)
	before := memAvailable()
	pols := plugintest.NewPolicies("")
	loaded := map[string]*wasm.Policy{}
	for _, name := range labModules {
		start := time.Now()
		rt := rt
		if name == "hostile" {
			rt = hostileRT
		}
		p, err := rt.Load(ctx, name, modules[name])
		if err != nil {
			t.Fatalf("load %s: %v", name, err)
		}
		t.Logf("%s.wasm (%d bytes): compiled and instantiated in the guest in %s", name, len(modules[name]), time.Since(start).Round(time.Millisecond))
		loaded[name] = p
	}
	t.Logf("guest MemAvailable %s before loading the modules, %s after", before, memAvailable())
	pols.Set("canary", loaded["canary"], []byte(`{"canary": "node=node-be1", "percent": 20}`), nil)
	pols.Set("leastconn", loaded["leastconn"], []byte(`{"scale": 600}`), nil)
	pols.Set("hostile-loop", loaded["hostile"], []byte(`{"mode": "loop"}`), nil)
	pols.Set("hostile-trap", loaded["hostile"], []byte(`{"mode": "trap"}`), nil)

	canary := policyService("canary", "10.96.7.10", "canary")
	const tick = time.Second
	reporter := plugintest.NewReporter()
	pl := newPolicyLoop(t, pols, reporter, tick, canary,
		policyService("loop", "10.96.7.11", "hostile-loop"), policyService("trap", "10.96.7.12", "hostile-trap"))
	src, clock := pl.src, pl.clock
	syncLoop := func() {
		t.Helper()
		start := time.Now()
		pl.sync(t)
		t.Logf("Sync with the wasm policies: %s", time.Since(start).Round(time.Millisecond))
	}
	table := func() map[string][]ipvs.Destination { return ipvsTable(t, "TCP/10.96.7.") }
	dests := backendDests
	split := func(what, vip string, n int, want map[string]int) {
		t.Helper()
		checkSplit(t, what, netip.AddrPortFrom(netip.MustParseAddr(vip), 80), n, want)
	}
	uniform := dests(1, 1, 1)
	wantTable := func(canary []ipvs.Destination, canarySched string) map[string][]ipvs.Destination {
		return map[string][]ipvs.Destination{
			"TCP/10.96.7.10:80 " + canarySched + " flags=0x0 persist=0s": canary,
			"TCP/10.96.7.11:80 rr flags=0x0 persist=0s":                  uniform,
			"TCP/10.96.7.12:80 rr flags=0x0 persist=0s":                  uniform,
		}
	}
	// conditions checks each Service's PolicyReady condition: ready, or
	// the reason it is not.
	conditions := func(when string) {
		t.Helper()
		want := map[string]string{"canary": plugin.ReasonPolicyEvaluated, "loop": "DeadlineExceeded", "trap": "Trapped"}
		got := map[string]string{}
		for k, c := range reporter.Conditions() {
			if c.Ready != (c.Reason == plugin.ReasonPolicyEvaluated) {
				t.Errorf("%s: %s condition %+v: ready and reason disagree", when, k.Name, c)
			}
			got[k.Name] = c.Reason
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: PolicyReady reasons (-want +got):\n%s", when, diff)
		}
	}

	syncLoop()
	if diff := cmp.Diff(wantTable(dests(2000, 4000, 4000), "wrr"), table(), cmpLab); diff != "" {
		t.Fatalf("IPVS table with the canary and hostile policies (-want +got):\n%s", diff)
	}
	conditions("with canary")
	split("canary 20% on be1", "10.96.7.10", 25, map[string]int{"be1": 5, "be2": 10, "be3": 10})
	split("never-returning policy, uniform fallback", "10.96.7.11", 15, map[string]int{"be1": 5, "be2": 5, "be3": 5})
	split("trapping policy, uniform fallback", "10.96.7.12", 15, map[string]int{"be1": 5, "be2": 5, "be3": 5})

	// Hold five connections: one wrr cycle of 2000/4000/4000.
	if diff := cmp.Diff(map[string]int{"be1": 1, "be2": 2, "be3": 2}, holdConnections(t, netip.MustParseAddrPort("10.96.7.10:80"), 5)); diff != "" {
		t.Fatalf("held connections per backend (-want +got):\n%s", diff)
	}

	// The Service switches to leastconn; the statistics tick reads the
	// held connections for it. The failing Services wait for a change of
	// their own and stay on uniform weights.
	canary.Service.Policy = "leastconn"
	src.Push(model.Delta{Services: map[model.ServiceKey]model.ServiceState{canary.Service.Key: canary}})
	clock.Step(tick)
	syncLoop()
	if diff := cmp.Diff(wantTable(dests(300, 200, 200), "wrr"), table(), cmpLab); diff != "" {
		t.Fatalf("IPVS table with leastconn over 1/2/2 held connections (-want +got):\n%s", diff)
	}
	conditions("with leastconn")
	split("leastconn 300/200/200", "10.96.7.10", 14, map[string]int{"be1": 6, "be2": 4, "be3": 4})
	split("never-returning policy after the tick", "10.96.7.11", 6, map[string]int{"be1": 2, "be2": 2, "be3": 2})
}
