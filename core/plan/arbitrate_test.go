package plan_test

import (
	"testing"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/model/modeltest"
	"github.com/switchyard-lb/switchyard/core/plan"
)

// externalIPState is a ClusterIP Service key with cluster IP clusterIP,
// external IP 192.0.2.30 and the http port on port, backed by one ready
// endpoint.
func externalIPState(key model.ServiceKey, clusterIP string, port uint16, backend string) model.ServiceState {
	return model.ServiceState{
		Service: &model.Service{Key: key, Type: model.ClusterIP, ClusterIPs: modeltest.Addrs(clusterIP), ExternalIPs: modeltest.Addrs("192.0.2.30"),
			Ports: []model.ServicePort{{Name: "http", Protocol: model.TCP, Port: port}}},
		Endpoints: []model.Endpoint{modeltest.Ready(backend, "n2")},
	}
}

// contested is the Contest for 192.0.2.30:80/TCP held by owner.
func contested(owner model.ServiceKey) []model.Contest {
	return []model.Contest{{VirtualServiceKey: model.VirtualServiceKey{Addr: modeltest.Addr("192.0.2.30"), Port: 80, Protocol: model.TCP}, Owner: owner}}
}

// TestPlannerContests: a virtual service several Services ask for goes
// to the lowest ServiceKey, the others list it in Contested, and when its
// holder changes every Service whose plan that changes is reported, so an
// incremental Apply covers the hand-over. After each step the plan equals
// a full replan of the same states by a new Planner.
func TestPlannerContests(t *testing.T) {
	a80 := externalIPState(keyA, "10.96.0.1", 80, "10.0.1.1")
	b80 := externalIPState(keyB, "10.96.0.2", 80, "10.0.2.1")
	c80 := externalIPState(keyC, "10.96.0.3", 80, "10.0.3.1")
	planA80 := &model.ServicePlan{Key: keyA, VirtualServices: []model.VirtualService{
		vs(model.FrontendClusterIP, "10.96.0.1", 80, dests("10.0.1.1")),
		vs(model.FrontendExternalIP, "192.0.2.30", 80, dests("10.0.1.1")),
	}}
	lostB := &model.ServicePlan{Key: keyB, VirtualServices: []model.VirtualService{
		vs(model.FrontendClusterIP, "10.96.0.2", 80, dests("10.0.2.1")),
	}}
	wonB := &model.ServicePlan{Key: keyB, VirtualServices: []model.VirtualService{
		vs(model.FrontendClusterIP, "10.96.0.2", 80, dests("10.0.2.1")),
		vs(model.FrontendExternalIP, "192.0.2.30", 80, dests("10.0.2.1")),
	}}
	lostC := &model.ServicePlan{Key: keyC, VirtualServices: []model.VirtualService{
		vs(model.FrontendClusterIP, "10.96.0.3", 80, dests("10.0.3.1")),
	}}
	with := func(sp *model.ServicePlan, c []model.Contest) *model.ServicePlan {
		out := *sp
		out.Contested = c
		return &out
	}

	steps := []struct {
		name     string
		services map[model.ServiceKey]model.ServiceState
		changed  []model.ServiceKey
		want     map[model.ServiceKey]*model.ServicePlan
	}{
		{
			name:     "b alone holds it",
			services: map[model.ServiceKey]model.ServiceState{keyB: b80},
			changed:  []model.ServiceKey{keyB},
			want:     map[model.ServiceKey]*model.ServicePlan{keyB: wonB},
		},
		{
			name:     "two Services on one key: a sorts first and takes it from b",
			services: map[model.ServiceKey]model.ServiceState{keyA: a80},
			changed:  []model.ServiceKey{keyA, keyB},
			want:     map[model.ServiceKey]*model.ServicePlan{keyA: planA80, keyB: with(lostB, contested(keyA))},
		},
		{
			name: "the loser's contested backend changes: nothing to apply",
			services: map[model.ServiceKey]model.ServiceState{keyB: {Service: b80.Service,
				Endpoints: []model.Endpoint{modeltest.Ready("10.0.2.1", "n2"), modeltest.NotReady("10.0.2.9", "n2")}}},
			want: map[model.ServiceKey]*model.ServicePlan{keyA: planA80, keyB: with(lostB, contested(keyA))},
		},
		{
			name:     "three-way contest: c loses to a as well",
			services: map[model.ServiceKey]model.ServiceState{keyC: c80},
			changed:  []model.ServiceKey{keyC},
			want: map[model.ServiceKey]*model.ServicePlan{
				keyA: planA80, keyB: with(lostB, contested(keyA)), keyC: with(lostC, contested(keyA)),
			},
		},
		{
			name:     "the winner changes port: b takes the key over, c now loses to b",
			services: map[model.ServiceKey]model.ServiceState{keyA: externalIPState(keyA, "10.96.0.1", 8080, "10.0.1.1")},
			changed:  []model.ServiceKey{keyA, keyB, keyC},
			want: map[model.ServiceKey]*model.ServicePlan{
				keyA: {Key: keyA, VirtualServices: []model.VirtualService{
					vs(model.FrontendClusterIP, "10.96.0.1", 8080, dests("10.0.1.1")),
					vs(model.FrontendExternalIP, "192.0.2.30", 8080, dests("10.0.1.1")),
				}},
				keyB: wonB, keyC: with(lostC, contested(keyB)),
			},
		},
		{
			name:     "the winner is deleted: c takes the key over",
			services: map[model.ServiceKey]model.ServiceState{keyB: deleted()},
			changed:  []model.ServiceKey{keyB, keyC},
			want: map[model.ServiceKey]*model.ServicePlan{
				keyA: {Key: keyA, VirtualServices: []model.VirtualService{
					vs(model.FrontendClusterIP, "10.96.0.1", 8080, dests("10.0.1.1")),
					vs(model.FrontendExternalIP, "192.0.2.30", 8080, dests("10.0.1.1")),
				}},
				keyC: {Key: keyC, VirtualServices: []model.VirtualService{
					vs(model.FrontendClusterIP, "10.96.0.3", 80, dests("10.0.3.1")),
					vs(model.FrontendExternalIP, "192.0.2.30", 80, dests("10.0.3.1")),
				}},
			},
		},
		{
			name:     "a comes back to port 80 and takes it from c",
			services: map[model.ServiceKey]model.ServiceState{keyA: a80},
			changed:  []model.ServiceKey{keyA, keyC},
			want:     map[model.ServiceKey]*model.ServicePlan{keyA: planA80, keyC: with(lostC, contested(keyA))},
		},
		{
			name:     "the loser leaves: the winner's plan stays",
			services: map[model.ServiceKey]model.ServiceState{keyC: deleted()},
			changed:  []model.ServiceKey{keyC},
			want:     map[model.ServiceKey]*model.ServicePlan{keyA: planA80},
		},
	}

	p := plan.New(plan.Options{})
	states := map[model.ServiceKey]model.ServiceState{}
	for _, st := range steps {
		got := p.Update(nil, st.services)
		if d := diff(st.changed, got); d != "" {
			t.Errorf("%s: changed keys (-want +got):\n%s", st.name, d)
		}
		if d := diff(st.want, p.Plan().Services); d != "" {
			t.Errorf("%s: plan (-want +got):\n%s", st.name, d)
		}
		for k, s := range st.services {
			if s.Service == nil {
				delete(states, k)
			} else {
				states[k] = s
			}
		}
		full := plan.New(plan.Options{})
		full.Update(thisNode(), states) // a node arrives: a full replan
		full.SetOptions(plan.Options{Scheduler: "rr", IgnoreUnclassed: true})
		if d := diff(p.Plan().Services, full.Plan().Services); d != "" {
			t.Errorf("%s: incremental plan differs from a full replan (-incremental +full):\n%s", st.name, d)
		}
	}
}

func TestArbitrateKeepsPlansWithoutContest(t *testing.T) {
	a := &model.ServicePlan{Key: keyA, VirtualServices: []model.VirtualService{vs(model.FrontendClusterIP, "10.96.0.1", 80, nil)}}
	b := &model.ServicePlan{Key: keyB, Rejected: plan.ReasonHeadless}
	got := plan.Arbitrate(map[model.ServiceKey]*model.ServicePlan{keyA: a, keyB: b})
	if got[keyA] != a || got[keyB] != b || len(got) != 2 {
		t.Errorf("Arbitrate without a contest = %v, want the plans as they were", got)
	}
}
