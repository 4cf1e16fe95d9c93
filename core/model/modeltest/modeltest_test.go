package modeltest_test

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/model/modeltest"
)

func TestBuilders(t *testing.T) {
	a := netip.MustParseAddr("10.0.0.1")
	key := model.ServiceKey{Namespace: "default", Name: "web"}
	http := model.ServicePort{Name: "http", Protocol: model.TCP, Port: 80}
	ready := model.Endpoint{Addr: a, Port: 8080, PortName: "http", Protocol: model.TCP, NodeName: "n1", Ready: true, Serving: true}
	for _, tt := range []struct {
		name      string
		got, want any
	}{
		{"Ready", modeltest.Ready("10.0.0.1", "n1"), ready},
		{"Terminating", modeltest.Terminating("10.0.0.1", "n1"),
			model.Endpoint{Addr: a, Port: 8080, PortName: "http", Protocol: model.TCP, NodeName: "n1", Serving: true, Terminating: true}},
		{"Stopped", modeltest.Stopped("10.0.0.1", "n1"),
			model.Endpoint{Addr: a, Port: 8080, PortName: "http", Protocol: model.TCP, NodeName: "n1", Terminating: true}},
		{"NotReady", modeltest.NotReady("10.0.0.1", "n1"),
			model.Endpoint{Addr: a, Port: 8080, PortName: "http", Protocol: model.TCP, NodeName: "n1"}},
		{"no Addrs", modeltest.Addrs() != nil, true},
		{"Prefixes", modeltest.Prefixes("10.0.0.0/8"), []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}},
		{"ClusterIP", modeltest.ClusterIP(key, "10.96.0.1", "fd00::1"),
			&model.Service{Key: key, Type: model.ClusterIP, ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.1"), netip.MustParseAddr("fd00::1")},
				Ports: []model.ServicePort{http}}},
		{"LoadBalancer", modeltest.LoadBalancer(key, []string{"10.96.0.1"}, "192.0.2.1"),
			&model.Service{Key: key, Type: model.LoadBalancer, ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.1")},
				LoadBalancerIPs: []netip.Addr{netip.MustParseAddr("192.0.2.1")},
				Ports:           []model.ServicePort{{Name: "http", Protocol: model.TCP, Port: 80, NodePort: 30080}}}},
		{"With", modeltest.With(modeltest.ClusterIP(key, "10.96.0.1"), func(s *model.Service) { s.Scheduler = "mh" }),
			&model.Service{Key: key, Type: model.ClusterIP, ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.1")},
				Ports: []model.ServicePort{http}, Scheduler: "mh"}},
		{"State", modeltest.State(modeltest.ClusterIP(key, "10.96.0.1"), modeltest.Ready("10.0.0.1", "n1")),
			model.ServiceState{Service: &model.Service{Key: key, Type: model.ClusterIP, ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.1")},
				Ports: []model.ServicePort{http}}, Endpoints: []model.Endpoint{ready}}},
	} {
		if diff := cmp.Diff(tt.want, tt.got, cmpopts.EquateComparable(netip.Addr{}, netip.Prefix{})); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
	}
}

func TestBuildersReturnFreshValues(t *testing.T) {
	key := model.ServiceKey{Namespace: "default", Name: "web"}
	a := modeltest.LoadBalancer(key, []string{"10.96.0.1"}, "192.0.2.1")
	a.Ports[0].Port = 81
	if b := modeltest.LoadBalancer(key, []string{"10.96.0.1"}, "192.0.2.1"); b.Ports[0].Port != 80 {
		t.Errorf("a change to one Service's port shows in the next: port %d", b.Ports[0].Port)
	}
	if modeltest.HTTP.NodePort != 0 {
		t.Errorf("HTTP.NodePort = %d after LoadBalancer, want 0", modeltest.HTTP.NodePort)
	}
}
