package policystage_test

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/model/modeltest"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/core/plugin/plugintest"
	"github.com/switchyard-lb/switchyard/core/policystage"
	"github.com/switchyard-lb/switchyard/core/runner/runnertest"
	"github.com/switchyard-lb/switchyard/ipvs/dryrun"
)

// BenchmarkPolicyReevaluateAll measures a statistics tick over 10,000
// Services of 3 endpoints each: every policy runs again and nothing
// changes, so the dataplane gets no Apply. It runs with one worker and
// with GOMAXPROCS workers, for two Go policies: one that returns at once
// (instant: the stage's own cost) and one that first burns a CPU for
// about 20µs (busy: see busyWork).
func BenchmarkPolicyReevaluateAll(b *testing.B) {
	for _, policy := range []struct {
		name string
		work int
	}{{"instant", 0}, {"busy", busyWork}} {
		for _, workers := range []int{1, runtime.GOMAXPROCS(0)} {
			b.Run(fmt.Sprintf("policy=%s/workers=%d", policy.name, workers), func(b *testing.B) {
				benchmarkReevaluateAll(b, policy.work, workers)
			})
		}
	}
}

// busyWork is the busy policy's work per evaluation: rounds of xorshift,
// about 20µs on one idle core of the 2026 development machine, what a
// WebAssembly policy with every guard on costs for 50 endpoints.
const busyWork = 8000

// burn does n rounds of xorshift and returns the result, so the compiler
// keeps the work.
func burn(n int) uint64 {
	x := uint64(88172645463325252)
	for range n {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	return x
}

func benchmarkReevaluateAll(b *testing.B, work, workers int) {
	const services = 10000
	src := plugintest.NewSource()
	d := model.Delta{Nodes: map[string]*model.Node{"node-a": nodeA}, Services: map[model.ServiceKey]model.ServiceState{}}
	for i := range services {
		key := model.ServiceKey{Namespace: "bench", Name: fmt.Sprint("svc-", i)}
		st := modeltest.State(modeltest.ClusterIP(key, netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)}).String()))
		st.Service.Policy = "weights"
		for j := range 3 {
			st.Endpoints = append(st.Endpoints, modeltest.Ready(fmt.Sprintf("10.%d.%d.%d", 100+j, byte(i>>8), byte(i)), "node-a"))
		}
		d.Services[key] = st
	}
	src.Push(d)
	src.SetSynced(true)
	pols := plugintest.NewPolicies("weights")
	fn := weights(3, 1, 1)
	pols.Set("weights", plugintest.NewFunc("weights", func(ctx context.Context, in *plugin.PolicyInput) (plugin.PolicyResult, error) {
		// Work rather than sleep: a policy evaluation holds a CPU.
		if burn(work) == 0 {
			return plugin.PolicyResult{}, fmt.Errorf("xorshift reached 0")
		}
		return fn(ctx, in)
	}), nil, nil)
	clock := runnertest.NewClock(t0)
	loop := newLoop(src, dryrun.New(), clock.Now, policystage.Config{Policies: pols, StatsInterval: time.Second, Workers: workers})
	if err := loop.Sync(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		clock.Step(time.Second)
		if err := loop.Sync(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/services, "ns/service")
}

// BenchmarkBusyWork is one evaluation's work of the busy policy alone, to
// calibrate busyWork.
func BenchmarkBusyWork(b *testing.B) {
	for b.Loop() {
		burn(busyWork)
	}
}
