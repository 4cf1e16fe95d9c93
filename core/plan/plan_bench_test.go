package plan_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/model/modeltest"
	"github.com/switchyard-lb/switchyard/core/plan"
)

const endpointsPerService = 10

var benchSizes = []int{1_000, 10_000, 50_000}

func addr4(n int) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
}

// benchService builds Service i of a synthetic cluster: one TCP port, every
// tenth a LoadBalancer, every tenth a NodePort, the rest ClusterIP; ten
// ready endpoints on 100 nodes in 3 zones, with zone hints.
func benchService(i int) model.ServiceState {
	svc := &model.Service{
		Key:        model.ServiceKey{Namespace: fmt.Sprintf("ns-%d", i/100), Name: fmt.Sprintf("svc-%d", i)},
		Type:       model.ClusterIP,
		ClusterIPs: []netip.Addr{addr4(10<<24 | 96<<16 + i)},
		Ports:      []model.ServicePort{{Name: "http", Protocol: model.TCP, Port: 80}},
	}
	switch i % 10 {
	case 0:
		svc.Type = model.LoadBalancer
		svc.Ports[0].NodePort = uint16(30000 + i%2768)
		svc.LoadBalancerIPs = []netip.Addr{addr4(198<<24 | 18<<16 + i)}
	case 1:
		svc.Type = model.NodePort
		svc.Ports[0].NodePort = uint16(30000 + i%2768)
	}
	eps := make([]model.Endpoint, endpointsPerService)
	for j := range eps {
		eps[j] = model.Endpoint{
			Addr: addr4(10<<24 | 128<<16 + i*endpointsPerService + j), Port: 8080, PortName: "http", Protocol: model.TCP,
			NodeName: fmt.Sprintf("node-%d", (i+j)%100), Zone: fmt.Sprintf("zone-%d", j%3),
			Ready: true, Serving: true, HintZones: []string{fmt.Sprintf("zone-%d", j%3)},
		}
	}
	return model.ServiceState{Service: svc, Endpoints: eps}
}

func benchCluster(n int) map[model.ServiceKey]model.ServiceState {
	states := make(map[model.ServiceKey]model.ServiceState, n)
	for i := range n {
		st := benchService(i)
		states[st.Service.Key] = st
	}
	return states
}

func benchNode() *model.Node {
	return &model.Node{Name: "node-0", Zone: "zone-0", Addresses: modeltest.Addrs("192.168.0.10", "10.0.0.10")}
}

// BenchmarkPlanFull plans a whole cluster from nothing: the first sync.
func BenchmarkPlanFull(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			states := benchCluster(n)
			node := benchNode()
			b.ReportAllocs()
			for b.Loop() {
				p := plan.New(plan.Options{})
				if got := len(p.Update(node, states)); got != n {
					b.Fatalf("Update() changed %d Services, want %d", got, n)
				}
			}
		})
	}
}

// BenchmarkPlanEndpointChange measures one endpoint change (an endpoint
// turning not ready, or ready again) in a planned cluster. Its cost must
// not grow with the cluster.
func BenchmarkPlanEndpointChange(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			node := benchNode()
			p := plan.New(plan.Options{})
			p.Update(node, benchCluster(n))

			// Two versions of 512 Services spread over the cluster: as
			// planned, and with one endpoint not ready.
			const changing = 512
			var versions [changing][2]model.ServiceState
			for i := range changing {
				st := benchService(i * n / changing)
				versions[i][0] = st
				eps := append([]model.Endpoint(nil), st.Endpoints...)
				eps[3].Ready, eps[3].Serving = false, false
				versions[i][1] = model.ServiceState{Service: st.Service, Endpoints: eps}
			}
			change := make(map[model.ServiceKey]model.ServiceState, 1)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				st := versions[i%changing][1-(i/changing)%2]
				clear(change)
				change[st.Service.Key] = st
				if got := len(p.Update(node, change)); got != 1 {
					b.Fatalf("Update() changed %d Services, want 1", got)
				}
				i++
			}
		})
	}
}
