package registry_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/model/modeltest"
	"github.com/switchyard-lb/switchyard/core/plan"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/core/plugin/plugintest"
	"github.com/switchyard-lb/switchyard/core/policystage"
	"github.com/switchyard-lb/switchyard/core/reconcile"
	"github.com/switchyard-lb/switchyard/core/runner/runnertest"
	"github.com/switchyard-lb/switchyard/ipvs/dryrun"
	"github.com/switchyard-lb/switchyard/plugins/registry"
	"github.com/switchyard-lb/switchyard/plugins/wasm"
	"github.com/switchyard-lb/switchyard/plugins/wasm/wasmtest"
	"github.com/switchyard-lb/switchyard/test/harness"
)

// TestHostileModules runs the reconcile loop with this registry over the
// real WebAssembly host and the host's hostile test guests: every kind of
// misbehaviour ends in a fallback with its reason and Events on that
// Service alone; the loop's syncs keep succeeding and the healthy Service
// is evaluated each time.
func TestHostileModules(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and compiles WebAssembly guests")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	guests := map[string][]byte{}
	for _, g := range []string{"hostile", "forbidden", "abiv2"} {
		b, err := wasmtest.BuildGo(root, filepath.Join(root, "plugins/wasm/testdata/guests", g))
		if err != nil {
			t.Fatal(err)
		}
		guests[g] = b
	}
	cache, err := wasmtest.CacheDir()
	if err != nil {
		t.Fatal(err)
	}
	// The host's deadline is what the looping guest runs into: long
	// enough that the other guests never do on a loaded machine, so that
	// only "loop" fails by its deadline. The stage's deadline is above it.
	rt, err := wasm.NewRuntime(context.Background(), wasm.Config{CacheDir: filepath.Join(cache, "wazero"), Deadline: 10 * time.Second, MemoryLimitPages: 128})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close(context.Background()) })

	client := fake.NewClientset(
		policyCM("hostile", map[string][]byte{"policy.wasm": guests["hostile"]}, nil),
		policyCM("forbidden", map[string][]byte{"policy.wasm": guests["forbidden"]}, nil),
		policyCM("abiv2", map[string][]byte{"policy.wasm": guests["abiv2"]}, nil),
		policyCM("garbage-bytes", map[string][]byte{"policy.wasm": []byte("not a module")}, nil),
	)
	r := registry.New(client, registry.Options{
		Load: func(ctx context.Context, name string, module []byte) (registry.Module, error) {
			p, err := rt.Load(ctx, name, module)
			if err != nil {
				return nil, err
			}
			return p, nil
		},
	}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	// One Service per misbehaviour; the hostile guest reads its mode from
	// the parameters.
	want := map[string]string{
		"healthy":       plugin.ReasonPolicyEvaluated,
		"loop":          "DeadlineExceeded",
		"panic":         "Trapped",
		"oom":           "Trapped",
		"decline":       "Declined",
		"garbage":       "InvalidOutput",
		"oversize":      "InvalidOutput",
		"outside":       "InvalidOutput",
		"badversion":    "InvalidOutput",
		"count":         "InvalidOutput",
		"forbidden":     "LoadFailed",
		"abiv2":         "LoadFailed",
		"garbage-bytes": "LoadFailed",
		"missing":       "LoadFailed",
	}
	src := plugintest.NewSource()
	delta := model.Delta{Nodes: map[string]*model.Node{"node-a": {Name: "node-a", Ready: true}}, Services: map[model.ServiceKey]model.ServiceState{}}
	i := 0
	for name := range want {
		i++
		key := model.ServiceKey{Namespace: "default", Name: name}
		svc := modeltest.ClusterIP(key, fmt.Sprintf("10.96.0.%d", i))
		svc.Policy, svc.PolicyParams = "hostile", name
		switch name {
		case "healthy":
			svc.PolicyParams = ""
		case "forbidden", "abiv2", "garbage-bytes", "missing":
			svc.Policy, svc.PolicyParams = name, ""
		}
		delta.Services[key] = modeltest.State(svc, modeltest.Ready(fmt.Sprintf("10.244.%d.1", i), ""),
			modeltest.Ready(fmt.Sprintf("10.244.%d.2", i), ""), modeltest.Ready(fmt.Sprintf("10.244.%d.3", i), ""))
	}
	src.Push(delta)
	src.SetSynced(true)
	rep := plugintest.NewReporter()
	dry := dryrun.New()
	clock := runnertest.NewClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	pm := policystage.NewMetrics(nil)
	loop := reconcile.New(reconcile.Config{NodeName: "node-a", Source: src, Planner: plan.New(plan.Options{}), Dataplane: dry,
		PolicyStage: policystage.Config{Policies: r, Reporter: rep, Metrics: pm, Deadline: waitLimit, StatsInterval: 10 * time.Second},
		Now:         clock.Now})
	harness.Poll(t, waitLimit, harness.Cond("the registry's first load", r.HasSynced))

	for round := range 2 {
		if _, err := loop.Sync(context.Background()); err != nil {
			t.Fatalf("round %d: Sync = %v, want nil: a policy failure must not fail the sync", round, err)
		}
		got := map[string]string{}
		for k, c := range rep.Conditions() {
			got[k.Name] = c.Reason
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("round %d: PolicyReady reasons (-want +got):\n%s", round, diff)
		}
		if round == 0 {
			events := map[string][]string{}
			for _, e := range rep.TakeEvents() {
				events[e.Service.Name] = append(events[e.Service.Name], e.Reason)
			}
			for name := range want {
				var w []string
				if name != "healthy" {
					w = []string{plugin.ReasonPolicyFailed, plugin.ReasonPolicyFallback}
				}
				if diff := cmp.Diff(w, events[name]); diff != "" {
					t.Errorf("events of %s (-want +got):\n%s", name, diff)
				}
			}
		}
		// Every Service is programmed, the failed ones with uniform weights.
		for _, sp := range loop.State().Desired {
			for _, vs := range sp.VirtualServices {
				for _, d := range vs.Destinations {
					if d.Weight != 1 {
						t.Errorf("round %d: %s %s weight %d, want 1", round, sp.Service, d.Address, d.Weight)
					}
				}
				if len(vs.Destinations) != 3 {
					t.Errorf("round %d: %s has %d destinations", round, sp.Service, len(vs.Destinations))
				}
			}
		}
		clock.Step(10 * time.Second) // the statistics tick re-evaluates the working Services
	}
	if got := testutil.ToFloat64(pm.Evaluations.WithLabelValues("hostile", policystage.ResultSuccess)); got != 2 {
		t.Errorf("successful evaluations of hostile = %v, want 2 (healthy, twice)", got)
	}
	// The tick does not retry a failing Service: only a change does.
	if got := testutil.ToFloat64(pm.Failures.WithLabelValues("hostile", plugin.FailureDeadline)); got != 1 {
		t.Errorf("deadline failures of hostile = %v, want 1", got)
	}
	if n := len(rep.TakeEvents()); n != 0 {
		t.Errorf("%d more Events on a second sync with the same failures, want none", n)
	}
}
