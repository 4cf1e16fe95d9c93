package policystage_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/model/modeltest"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/core/plugin/plugintest"
)

// TestPolicyFirstSeen: a policy sees when each endpoint was first seen
// (slow start reads it): an endpoint keeps its time while the Service's
// endpoints change around it or it changes in place, a new one gets the
// round's time, and a Service deleted and created again starts over.
func TestPolicyFirstSeen(t *testing.T) {
	h := newPolicyHarness(t, 0)
	var (
		mu   sync.Mutex
		seen map[string]time.Duration // endpoint address: first seen, after t0
	)
	h.pols.Set("weights", plugintest.NewFunc("weights", func(ctx context.Context, in *plugin.PolicyInput) (plugin.PolicyResult, error) {
		mu.Lock()
		defer mu.Unlock()
		seen = map[string]time.Duration{}
		for _, ep := range in.Endpoints {
			seen[ep.Addr.String()] = ep.FirstSeen.Sub(t0)
		}
		return weights()(ctx, in)
	}), nil, nil)
	web := func(eps ...model.Endpoint) model.Delta {
		st := modeltest.State(modeltest.ClusterIP(webKey, "10.96.0.1"), eps...)
		st.Service.Policy = "weights"
		return model.Delta{Services: map[model.ServiceKey]model.ServiceState{webKey: st}}
	}
	h.start(t) // 10.244.1.2 and 10.244.2.2 at t0
	for _, step := range []struct {
		name  string
		delta model.Delta
		want  map[string]time.Duration
	}{
		{
			name:  "one endpoint replaced",
			delta: web(modeltest.Ready("10.244.2.2", "node-b"), modeltest.Ready("10.244.3.2", "node-c")),
			want:  map[string]time.Duration{"10.244.2.2": 0, "10.244.3.2": time.Minute},
		},
		{
			name:  "the same endpoints, moved to other nodes",
			delta: web(modeltest.Ready("10.244.2.2", "node-c"), modeltest.Ready("10.244.3.2", "node-b")),
			want:  map[string]time.Duration{"10.244.2.2": 0, "10.244.3.2": time.Minute},
		},
		{
			name:  "one added before the others",
			delta: web(modeltest.Ready("10.244.0.2", "node-a"), modeltest.Ready("10.244.2.2", "node-c"), modeltest.Ready("10.244.3.2", "node-b")),
			want:  map[string]time.Duration{"10.244.0.2": 3 * time.Minute, "10.244.2.2": 0, "10.244.3.2": time.Minute},
		},
		{
			name:  "deleted",
			delta: model.Delta{Services: map[model.ServiceKey]model.ServiceState{webKey: {}}},
			want:  map[string]time.Duration{"10.244.0.2": 3 * time.Minute, "10.244.2.2": 0, "10.244.3.2": time.Minute}, // not evaluated
		},
		{
			name:  "created again",
			delta: web(modeltest.Ready("10.244.2.2", "node-c")),
			want:  map[string]time.Duration{"10.244.2.2": 5 * time.Minute},
		},
	} {
		h.clock.Step(time.Minute)
		h.src.Push(step.delta)
		mustSync(t, h.loop)
		mu.Lock()
		got := seen
		mu.Unlock()
		if diff := cmp.Diff(step.want, got); diff != "" {
			t.Errorf("%s: first seen, after t0 (-want +got):\n%s", step.name, diff)
		}
	}
}
