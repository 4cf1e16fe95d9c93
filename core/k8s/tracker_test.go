package k8s

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/model/modeltest"
)

var (
	keyA  = model.ServiceKey{Namespace: "ns", Name: "a"}
	keyB  = model.ServiceKey{Namespace: "ns", Name: "b"}
	start = time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC)
)

func svc(key model.ServiceKey, port uint16) *model.Service {
	s := modeltest.ClusterIP(key, "10.96.0.1")
	s.Ports[0].Port = port
	return s
}

func terminating(e *model.Endpoint) { e.Ready, e.Terminating = false, true }

func eps(e ...model.Endpoint) []model.Endpoint { return e }

// trackerStep either changes the tracker (do, reporting whether the state
// changed) or takes a delta and compares it with want.
type trackerStep struct {
	name        string
	do          func(*tracker) bool
	wantChanged bool
	take        bool
	want        model.Delta
}

func setService(key model.ServiceKey, s *model.Service) func(*tracker) bool {
	return func(t *tracker) bool { return t.setService(key, s) }
}

func setSlice(key model.ServiceKey, name string, e []model.Endpoint, trigger time.Time) func(*tracker) bool {
	return func(t *tracker) bool { return t.setSlice(key, name, e, trigger) }
}

func deleteSlice(key model.ServiceKey, name string) func(*tracker) bool {
	return func(t *tracker) bool { return t.deleteSlice(key, name) }
}

func setNode(name string, n *model.Node) func(*tracker) bool {
	return func(t *tracker) bool { return t.setNode(name, n) }
}

var deltaOpts = []cmp.Option{
	cmpopts.EquateEmpty(),
	cmpopts.EquateComparable(netip.Addr{}, netip.Prefix{}),
}

func TestTracker(t *testing.T) {
	node1 := &model.Node{Name: "n1", Ready: true}
	node1NotReady := &model.Node{Name: "n1"}
	scenarios := []struct {
		name  string
		steps []trackerStep
	}{{
		name: "first take reports everything, the next nothing",
		steps: []trackerStep{
			{do: setService(keyA, svc(keyA, 80)), wantChanged: true},
			{do: setSlice(keyA, "a-1", eps(modeltest.Ready("10.0.0.2", ""), modeltest.Ready("10.0.0.1", "")), time.Time{}), wantChanged: true},
			{do: setNode("n1", node1), wantChanged: true},
			{take: true, want: model.Delta{
				Services: map[model.ServiceKey]model.ServiceState{keyA: {Service: svc(keyA, 80),
					Endpoints: eps(modeltest.Ready("10.0.0.1", ""), modeltest.Ready("10.0.0.2", ""))}},
				Nodes: map[string]*model.Node{"n1": node1}}},
			{take: true},
			{name: "an equal update is no change", do: setService(keyA, svc(keyA, 80))},
			{do: setNode("n1", &model.Node{Name: "n1", Ready: true})},
			{take: true},
		},
	}, {
		name: "a change and its undo collapse",
		steps: []trackerStep{
			{do: setService(keyA, svc(keyA, 80)), wantChanged: true},
			{do: setSlice(keyA, "a-1", eps(modeltest.Ready("10.0.0.1", "")), time.Time{}), wantChanged: true},
			{do: setNode("n1", node1), wantChanged: true},
			{take: true, want: model.Delta{
				Services: map[model.ServiceKey]model.ServiceState{keyA: {Service: svc(keyA, 80), Endpoints: eps(modeltest.Ready("10.0.0.1", ""))}},
				Nodes:    map[string]*model.Node{"n1": node1}}},
			{do: setService(keyA, svc(keyA, 81)), wantChanged: true},
			{do: setService(keyA, svc(keyA, 80)), wantChanged: true},
			{do: setSlice(keyA, "a-1", eps(modeltest.Ready("10.0.0.1", ""), modeltest.Ready("10.0.0.2", "")), start.Add(time.Second)), wantChanged: true},
			{do: setSlice(keyA, "a-1", eps(modeltest.Ready("10.0.0.1", "")), start.Add(2*time.Second)), wantChanged: true},
			{do: setNode("n1", node1NotReady), wantChanged: true},
			{do: setNode("n1", node1), wantChanged: true},
			{name: "nothing, and no trigger times", take: true},
		},
	}, {
		name: "delete and recreate between takes is no change; delete is reported once",
		steps: []trackerStep{
			{do: setService(keyA, svc(keyA, 80)), wantChanged: true},
			{take: true, want: model.Delta{Services: map[model.ServiceKey]model.ServiceState{keyA: {Service: svc(keyA, 80)}}}},
			{do: setService(keyA, nil), wantChanged: true},
			{do: setService(keyA, svc(keyA, 80)), wantChanged: true},
			{take: true},
			{do: setService(keyA, nil), wantChanged: true},
			{take: true, want: model.Delta{Services: map[model.ServiceKey]model.ServiceState{keyA: {}}}},
			{take: true},
			{name: "deleting what is unknown changes nothing", do: setService(keyB, nil)},
			{do: setNode("n9", nil)},
			{do: deleteSlice(keyB, "b-1")},
			{take: true},
		},
	}, {
		name: "slices before their Service, and after it",
		steps: []trackerStep{
			{do: setSlice(keyB, "b-1", eps(modeltest.Ready("10.0.0.1", "")), time.Time{}), wantChanged: true},
			{take: true, want: model.Delta{Services: map[model.ServiceKey]model.ServiceState{keyB: {Endpoints: eps(modeltest.Ready("10.0.0.1", ""))}}}},
			{do: setService(keyB, svc(keyB, 80)), wantChanged: true},
			{take: true, want: model.Delta{Services: map[model.ServiceKey]model.ServiceState{keyB: {Service: svc(keyB, 80), Endpoints: eps(modeltest.Ready("10.0.0.1", ""))}}}},
			{do: setService(keyB, nil), wantChanged: true},
			{take: true, want: model.Delta{Services: map[model.ServiceKey]model.ServiceState{keyB: {Endpoints: eps(modeltest.Ready("10.0.0.1", ""))}}}},
			{do: deleteSlice(keyB, "b-1"), wantChanged: true},
			{take: true, want: model.Delta{Services: map[model.ServiceKey]model.ServiceState{keyB: {}}}},
		},
	}, {
		name: "duplicates across slices collapse, the ready copy wins",
		steps: []trackerStep{
			{do: setSlice(keyA, "a-2", eps(modeltest.Ready("10.0.0.1", "n1")), time.Time{}), wantChanged: true},
			{name: "a terminating copy in an earlier slice loses", do: setSlice(keyA, "a-1", eps(modeltest.Terminating("10.0.0.1", ""), modeltest.Ready("10.0.0.3", "")), time.Time{}), wantChanged: true},
			{take: true, want: model.Delta{Services: map[model.ServiceKey]model.ServiceState{keyA: {
				Endpoints: eps(modeltest.Ready("10.0.0.1", "n1"), modeltest.Ready("10.0.0.3", ""))}}}},
			{do: deleteSlice(keyA, "a-2"), wantChanged: true},
			{take: true, want: model.Delta{Services: map[model.ServiceKey]model.ServiceState{keyA: {
				Endpoints: eps(modeltest.Terminating("10.0.0.1", ""), modeltest.Ready("10.0.0.3", ""))}}}},
			{name: "an empty slice changes nothing", do: setSlice(keyA, "a-3", nil, time.Time{})},
			{take: true},
		},
	}, {
		name: "endpoint churn: ready, terminating, gone, with trigger times",
		steps: []trackerStep{
			{do: setService(keyA, svc(keyA, 80)), wantChanged: true},
			{name: "a trigger time from before tracking started is not reported",
				do: setSlice(keyA, "a-1", eps(modeltest.Ready("10.0.0.1", "")), start.Add(-time.Hour)), wantChanged: true},
			{take: true, want: model.Delta{Services: map[model.ServiceKey]model.ServiceState{keyA: {
				Service: svc(keyA, 80), Endpoints: eps(modeltest.Ready("10.0.0.1", ""))}}}},
			{do: setSlice(keyA, "a-1", eps(modeltest.Terminating("10.0.0.1", "")), start.Add(2*time.Second)), wantChanged: true},
			{do: setSlice(keyA, "a-2", eps(modeltest.Ready("10.0.0.2", "")), start.Add(time.Second)), wantChanged: true},
			{take: true, want: model.Delta{
				Services: map[model.ServiceKey]model.ServiceState{keyA: {
					Service: svc(keyA, 80), Endpoints: eps(modeltest.Terminating("10.0.0.1", ""), modeltest.Ready("10.0.0.2", ""))}},
				TriggerTimes: []time.Time{start.Add(time.Second), start.Add(2 * time.Second)}}},
			{do: setSlice(keyA, "a-1", nil, start.Add(3*time.Second)), wantChanged: true},
			{take: true, want: model.Delta{
				Services: map[model.ServiceKey]model.ServiceState{keyA: {
					Service: svc(keyA, 80), Endpoints: eps(modeltest.Ready("10.0.0.2", ""))}},
				TriggerTimes: []time.Time{start.Add(3 * time.Second)}}},
			{name: "a trigger time alone is no change", do: setSlice(keyA, "a-2", eps(modeltest.Ready("10.0.0.2", "")), start.Add(4*time.Second))},
			{take: true},
		},
	}, {
		name: "node deleted",
		steps: []trackerStep{
			{do: setNode("n1", node1), wantChanged: true},
			{take: true, want: model.Delta{Nodes: map[string]*model.Node{"n1": node1}}},
			{do: setNode("n1", nil), wantChanged: true},
			{take: true, want: model.Delta{Nodes: map[string]*model.Node{"n1": nil}}},
			{take: true},
		},
	}}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			tr := newTracker(start)
			for i, st := range sc.steps {
				if st.take {
					got := tr.take()
					if diff := cmp.Diff(st.want, got, deltaOpts...); diff != "" {
						t.Fatalf("step %d %s: take (-want +got):\n%s", i, st.name, diff)
					}
					continue
				}
				if got := st.do(tr); got != st.wantChanged {
					t.Fatalf("step %d %s: changed = %v, want %v", i, st.name, got, st.wantChanged)
				}
			}
			// Whatever a scenario did, once all of it was taken and
			// deleted, nothing may be left behind.
			tr.take()
			for key, e := range tr.services {
				if e.service == nil && len(e.slices) == 0 {
					t.Errorf("entry for deleted Service %v kept after take", key)
				}
			}
		})
	}
}

// TestTrackerSliceWorkIsLocal checks that a slice event recomputes only its
// own Service: the other Services' merged endpoints are the very same
// slices as before.
func TestTrackerSliceWorkIsLocal(t *testing.T) {
	tr := newTracker(start)
	tr.setSlice(keyA, "a-1", eps(modeltest.Ready("10.0.0.1", "")), time.Time{})
	tr.setSlice(keyB, "b-1", eps(modeltest.Ready("10.0.1.1", "")), time.Time{})
	tr.take()
	before := &tr.services[keyB].endpoints[0]
	tr.setSlice(keyA, "a-1", eps(modeltest.Ready("10.0.0.2", "")), time.Time{})
	if &tr.services[keyB].endpoints[0] != before {
		t.Errorf("Service b's endpoints were rebuilt by a slice event of Service a")
	}
	if got := len(tr.dirtyServices); got != 1 {
		t.Errorf("dirty Services = %d, want 1", got)
	}
}

func TestMergeEndpointsWithinOneSlice(t *testing.T) {
	got := mergeEndpoints(map[string][]model.Endpoint{"a-1": eps(modeltest.Terminating("10.0.0.1", ""), modeltest.Ready("10.0.0.1", ""), modeltest.Ready("10.0.0.2", ""))})
	want := eps(modeltest.Ready("10.0.0.1", ""), modeltest.Ready("10.0.0.2", ""))
	if diff := cmp.Diff(want, got, deltaOpts...); diff != "" {
		t.Errorf("mergeEndpoints (-want +got):\n%s", diff)
	}
}

// BenchmarkTrackerEndpointChange measures one EndpointSlice change and the
// Take that hands it out, in clusters of growing size: the cost must stay
// flat.
func BenchmarkTrackerEndpointChange(b *testing.B) {
	for _, services := range []int{1000, 10000, 50000} {
		b.Run(fmt.Sprintf("services=%d", services), func(b *testing.B) {
			tr := newTracker(start)
			slices := make([][]model.Endpoint, 2)
			for i := range services {
				key := model.ServiceKey{Namespace: "ns", Name: fmt.Sprintf("svc-%d", i)}
				tr.setService(key, svc(key, 80))
				var e []model.Endpoint
				for j := range 10 {
					e = append(e, modeltest.Ready(fmt.Sprintf("10.%d.%d.%d", i>>8&255, i&255, j+1), ""))
				}
				tr.setSlice(key, key.Name+"-1", e, time.Time{})
				if i == 0 {
					slices[0] = e
					slices[1] = append([]model.Endpoint(nil), e...)
					terminating(&slices[1][3])
				}
			}
			tr.take()
			key := model.ServiceKey{Namespace: "ns", Name: "svc-0"}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 1; b.Loop(); i++ {
				tr.setSlice(key, "svc-0-1", slices[i%2], time.Time{})
				if d := tr.take(); len(d.Services) != 1 {
					b.Fatalf("take reported %d Services, want 1", len(d.Services))
				}
			}
		})
	}
}

// BenchmarkTrackerInitialSync measures recording a whole cluster (every
// Service with one slice of 10 endpoints) and the first Take.
func BenchmarkTrackerInitialSync(b *testing.B) {
	for _, services := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("services=%d", services), func(b *testing.B) {
			keys := make([]model.ServiceKey, services)
			svcs := make([]*model.Service, services)
			endpoints := make([][]model.Endpoint, services)
			for i := range services {
				keys[i] = model.ServiceKey{Namespace: "ns", Name: fmt.Sprintf("svc-%d", i)}
				svcs[i] = svc(keys[i], 80)
				for j := range 10 {
					endpoints[i] = append(endpoints[i], modeltest.Ready(fmt.Sprintf("10.%d.%d.%d", i>>8&255, i&255, j+1), ""))
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				tr := newTracker(start)
				for i, key := range keys {
					tr.setService(key, svcs[i])
					tr.setSlice(key, key.Name+"-1", endpoints[i], time.Time{})
				}
				if d := tr.take(); len(d.Services) != services {
					b.Fatalf("take reported %d Services, want %d", len(d.Services), services)
				}
			}
		})
	}
}
