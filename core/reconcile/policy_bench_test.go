package reconcile_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plan"
	"github.com/switchyard-lb/switchyard/core/reconcile"
	"github.com/switchyard-lb/switchyard/core/reconcile/reconciletest"
	"github.com/switchyard-lb/switchyard/ipvs/dryrun"
)

// BenchmarkPolicyReevaluateAll measures a statistics tick over 10,000
// Services of 3 endpoints each: every policy runs again (a Go policy, so
// this is the stage's own cost) and nothing changes, so the dataplane
// gets no Apply.
func BenchmarkPolicyReevaluateAll(b *testing.B) {
	const services = 10000
	src := reconciletest.NewSource()
	d := model.Delta{Nodes: map[string]*model.Node{"node-a": nodeA}, Services: map[model.ServiceKey]model.ServiceState{}}
	for i := range services {
		key := model.ServiceKey{Namespace: "bench", Name: fmt.Sprint("svc-", i)}
		st := clusterIP(key, netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)}).String())
		st.Service.Policy = "weights"
		for j := range 3 {
			st.Endpoints = append(st.Endpoints, ep(fmt.Sprintf("10.%d.%d.%d:8080", 100+j, byte(i>>8), byte(i)), "node-a"))
		}
		d.Services[key] = st
	}
	src.Push(d)
	src.SetSynced(true)
	pols := reconciletest.NewPolicies("weights")
	pols.Set("weights", reconciletest.NewFunc("weights", weights(3, 1, 1)), nil, nil)
	now := t0
	loop := reconcile.New(reconcile.Config{NodeName: "node-a", Source: src, Planner: plan.New(plan.Options{}), Dataplane: dryrun.New(),
		Policies: pols, StatsInterval: time.Second, Now: func() time.Time { return now }})
	if err := loop.Sync(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Second)
		if err := loop.Sync(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}
