package plan_test

import (
	"fmt"
	"net/netip"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plan"
)

// A LoadBalancer Service with externalTrafficPolicy Local: the ClusterIP
// balances over every ready endpoint, the external frontends over this
// node's only, and the node answers health checks with its local count.
func ExamplePlanService() {
	svc := &model.Service{
		Key:                   model.ServiceKey{Namespace: "shop", Name: "web"},
		Type:                  model.LoadBalancer,
		ClusterIPs:            []netip.Addr{netip.MustParseAddr("10.96.0.10")},
		LoadBalancerIPs:       []netip.Addr{netip.MustParseAddr("198.51.100.7")},
		Ports:                 []model.ServicePort{{Name: "http", Protocol: model.TCP, Port: 80, NodePort: 30080}},
		ExternalTrafficPolicy: model.PolicyLocal,
		HealthCheckNodePort:   32100,
	}
	endpoint := func(addr, node string) model.Endpoint {
		return model.Endpoint{Addr: netip.MustParseAddr(addr), Port: 8080, PortName: "http", Protocol: model.TCP,
			NodeName: node, Ready: true, Serving: true}
	}
	eps := []model.Endpoint{endpoint("10.0.1.5", "node-a"), endpoint("10.0.2.9", "node-b")}
	node := &model.Node{Name: "node-a", Addresses: []netip.Addr{netip.MustParseAddr("192.168.1.10")}}

	p := plan.PlanService(svc, eps, node, &plan.Options{})
	for _, vs := range p.VirtualServices {
		fmt.Printf("%-12s %s:%d/%s local=%t ->", vs.Kind, vs.Addr, vs.Port, vs.Protocol, vs.Local)
		for _, d := range vs.Destinations {
			fmt.Printf(" %s:%d", d.Addr, d.Port)
		}
		fmt.Println()
	}
	fmt.Println("announce", p.Announce, "health check port", p.HealthCheckNodePort, "local endpoints", p.LocalEndpoints)
	// Output:
	// ClusterIP    10.96.0.10:80/TCP local=false -> 10.0.1.5:8080 10.0.2.9:8080
	// NodePort     192.168.1.10:30080/TCP local=true -> 10.0.1.5:8080
	// LoadBalancer 198.51.100.7:80/TCP local=true -> 10.0.1.5:8080
	// announce [198.51.100.7] health check port 32100 local endpoints 1
}
