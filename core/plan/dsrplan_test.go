package plan_test

import (
	"slices"
	"testing"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/model/modeltest"
	"github.com/switchyard-lb/switchyard/core/plan"
)

// TestPlanServiceForwardingMode covers the dsr mode: a dsr Service's
// LoadBalancer and external IP frontends are Local (this node's
// endpoints, the client's address kept; in-cluster clients get every
// endpoint) and carry their backend nodes, the same on every node, for
// TCP and UDP alike and for IPv6 over ipip (ip6ip6) and GUE alike. Its
// ClusterIP and
// NodePort frontends stay as in nat mode. The annotation overrides the
// cluster's default both ways.
func TestPlanServiceForwardingMode(t *testing.T) {
	eps := []model.Endpoint{
		modeltest.Ready("10.0.0.1", "n1"), modeltest.Ready("10.0.0.2", "n2"), modeltest.Ready("10.0.0.3", "n2"),
		modeltest.Terminating("10.0.0.4", "n3"), modeltest.Ready("10.0.0.5", ""), modeltest.NotReady("10.0.0.6", "n4"),
		modeltest.Ready("fd00::1", "n1"),
	}
	all, all6 := dests("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.5"), dests("fd00::1")
	backends := []model.NodeWeight{{Node: "n1", Weight: 1}, {Node: "n2", Weight: 2}}
	backends6 := []model.NodeWeight{{Node: "n1", Weight: 1}}
	natPlan := func(proto model.Protocol) []model.VirtualService {
		v := []model.VirtualService{
			vs(model.FrontendClusterIP, "10.96.0.10", 80, all),
			vs(model.FrontendNodePort, "192.168.0.1", 30080, all),
			vs(model.FrontendLoadBalancer, "198.51.100.1", 80, all),
			vs(model.FrontendExternalIP, "198.51.100.2", 80, all),
			vs(model.FrontendLoadBalancer, "2001:db8::1", 80, all6),
		}
		for i := range v {
			v[i].Protocol = proto
		}
		return v
	}
	// dsrPlan is the dsr plan on a node whose local endpoints are self
	// (IPv4) and self6 (IPv6).
	dsrPlan := func(proto model.Protocol, self, self6 []model.Destination) []model.VirtualService {
		v := natPlan(proto)
		for _, i := range []int{2, 3} {
			v[i] = withInternal(local(v[i]), all)
			v[i].Destinations = self
			v[i].DSRNodes = backends
		}
		v[4] = withInternal(local(v[4]), all6)
		v[4].Destinations = self6
		v[4].DSRNodes = backends6
		return v
	}
	n1, n1v6 := dests("10.0.0.1"), dests("fd00::1")
	tests := []struct {
		name       string
		annotation model.ForwardingMode
		dflt       model.ForwardingMode
		enc        model.Encapsulation
		proto      model.Protocol
		node       string
		want       []model.VirtualService
	}{
		{name: "default nat", want: natPlan(model.TCP)},
		{name: "annotation dsr", annotation: model.ForwardingDSR, node: "n1", want: dsrPlan(model.TCP, n1, n1v6)},
		{name: "default dsr", dflt: model.ForwardingDSR, node: "n1", want: dsrPlan(model.TCP, n1, n1v6)},
		{name: "annotation nat over default dsr", annotation: model.ForwardingNAT, dflt: model.ForwardingDSR, want: natPlan(model.TCP)},
		{name: "dsr on a node without endpoints", annotation: model.ForwardingDSR, node: "n5", want: dsrPlan(model.TCP, nil, nil)},
		{name: "dsr over ipip", annotation: model.ForwardingDSR, enc: model.IPIP, node: "n1", want: dsrPlan(model.TCP, n1, n1v6)},
		{name: "dsr over gue, IPv6 too", annotation: model.ForwardingDSR, enc: model.GUE, node: "n1", want: dsrPlan(model.TCP, n1, n1v6)},
		{name: "UDP dsr", annotation: model.ForwardingDSR, proto: model.UDP, node: "n1", want: dsrPlan(model.UDP, n1, n1v6)},
		{name: "UDP nat", proto: model.UDP, want: natPlan(model.UDP)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := modeltest.LoadBalancer(webKey, []string{"10.96.0.10", "fd00:96::10"}, "198.51.100.1", "2001:db8::1")
			svc.ExternalIPs = modeltest.Addrs("198.51.100.2")
			svc.Ports[0].NodePort = 30080
			if tt.proto != 0 {
				svc.Ports[0].Protocol = tt.proto
			}
			svc.ForwardingMode = tt.annotation
			eps := slices.Clone(eps)
			for i := range eps {
				eps[i].Protocol = svc.Ports[0].Protocol
			}
			node := &model.Node{Name: tt.node, Addresses: modeltest.Addrs("192.168.0.1")}
			if tt.node == "" {
				node.Name = "n1"
			}
			got := plan.PlanService(svc, eps, node, &plan.Options{ForwardingMode: tt.dflt, DSREncapsulation: tt.enc})
			var v4 []model.VirtualService
			for _, v := range got.VirtualServices {
				if v.Addr.Is4() || v.Kind == model.FrontendLoadBalancer {
					v4 = append(v4, v)
				}
			}
			if d := diff(tt.want, v4); d != "" {
				t.Errorf("PlanService() frontends mismatch (-want +got):\n%s", d)
			}
		})
	}
}

// TestPlanServiceDSRNodesFallBackToTerminating: with no ready endpoint,
// the nodes holding serving and terminating ones are the backend nodes;
// with none at all, the list is empty, not nil (still dsr).
func TestPlanServiceDSRNodesFallBackToTerminating(t *testing.T) {
	for _, tt := range []struct {
		name string
		eps  []model.Endpoint
		want []model.NodeWeight
	}{
		{"terminating", []model.Endpoint{modeltest.Terminating("10.0.0.4", "n3"), modeltest.NotReady("10.0.0.6", "n4")}, []model.NodeWeight{{Node: "n3", Weight: 1}}},
		{"none", nil, []model.NodeWeight{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			svc := modeltest.LoadBalancer(webKey, []string{"10.96.0.10"}, "198.51.100.1")
			svc.ForwardingMode = model.ForwardingDSR
			got := plan.PlanService(svc, tt.eps, thisNode(), nil)
			lb := got.VirtualServices[len(got.VirtualServices)-1]
			if lb.Kind != model.FrontendLoadBalancer || lb.DSRNodes == nil {
				t.Fatalf("last frontend %+v: want the dsr LoadBalancer frontend", lb)
			}
			if d := diff(tt.want, lb.DSRNodes); d != "" {
				t.Errorf("DSRNodes mismatch (-want +got):\n%s", d)
			}
		})
	}
}
