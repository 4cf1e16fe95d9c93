package plan_test

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/model/modeltest"
	"github.com/switchyard-lb/switchyard/core/plan"
	"github.com/switchyard-lb/switchyard/core/plugin/plugintest"
	"github.com/switchyard-lb/switchyard/ipvs/dryrun"
)

func TestPlanService(t *testing.T) {
	const (
		CIP = model.FrontendClusterIP
		NP  = model.FrontendNodePort
		LB  = model.FrontendLoadBalancer
		EIP = model.FrontendExternalIP
	)
	tests := []struct {
		name string
		svc  *model.Service
		eps  []model.Endpoint
		node *model.Node // thisNode() when nil and !noNode
		opts *plan.Options
		// noNode plans with an unknown node.
		noNode bool
		want   *model.ServicePlan
	}{
		{
			name: "ClusterIP uses ready endpoints of its port, sorted and deduplicated",
			svc:  modeltest.ClusterIP(webKey, "10.96.0.10"),
			eps: []model.Endpoint{
				modeltest.Ready("10.0.0.3", "n2"),
				modeltest.Ready("10.0.0.1", "n1"),
				modeltest.Ready("10.0.0.3", "n2"), // same endpoint from two slices
				modeltest.NotReady("10.0.0.4", "n2"),
				modeltest.Stopped("10.0.0.5", "n2"),
				func() model.Endpoint { e := modeltest.Ready("10.0.0.6", "n2"); e.PortName = "metrics"; return e }(),
				func() model.Endpoint { e := modeltest.Ready("10.0.0.7", "n2"); e.Protocol = model.UDP; return e }(),
				func() model.Endpoint { e := modeltest.Ready("10.0.0.8", "n2"); e.Port = 0; return e }(),
			},
			want: &model.ServicePlan{Key: webKey, VirtualServices: []model.VirtualService{
				vs(CIP, "10.96.0.10", 80, dests("10.0.0.1", "10.0.0.3")),
			}},
		},
		{
			name: "ExternalName is rejected",
			svc:  &model.Service{Key: webKey, Type: model.ExternalName, Ports: []model.ServicePort{modeltest.HTTP}},
			eps:  []model.Endpoint{modeltest.Ready("10.0.0.1", "n1")},
			want: &model.ServicePlan{Key: webKey, Rejected: plan.ReasonExternalName},
		},
		{
			name: "an unknown type (left zero by the watch layer) is rejected",
			svc:  &model.Service{Key: webKey, ClusterIPs: modeltest.Addrs("10.96.0.10"), Ports: []model.ServicePort{modeltest.HTTP}},
			eps:  []model.Endpoint{modeltest.Ready("10.0.0.1", "n1")},
			want: &model.ServicePlan{Key: webKey, Rejected: plan.ReasonUnknownType},
		},
		{
			name: "headless is rejected, external IPs included, as kube-proxy skips it",
			svc: &model.Service{Key: webKey, Type: model.ClusterIP, ExternalIPs: modeltest.Addrs("203.0.113.1"),
				Ports: []model.ServicePort{modeltest.HTTP}},
			eps:  []model.Endpoint{modeltest.Ready("10.0.0.1", "n1")},
			want: &model.ServicePlan{Key: webKey, Rejected: plan.ReasonHeadless},
		},
		{
			name: "no endpoints: frontends without destinations",
			svc:  modeltest.LoadBalancer(webKey, []string{"10.96.0.10"}, "198.51.100.1"),
			want: &model.ServicePlan{Key: webKey, Announce: modeltest.Addrs("198.51.100.1"), VirtualServices: []model.VirtualService{
				vs(CIP, "10.96.0.10", 80, nil),
				vs(NP, "192.168.0.1", 30080, nil),
				vs(LB, "198.51.100.1", 80, nil),
			}},
		},
		{
			name: "TCP, UDP and SCTP ports match endpoints by name and protocol",
			svc: &model.Service{Key: webKey, Type: model.ClusterIP, ClusterIPs: modeltest.Addrs("10.96.0.10"), Ports: []model.ServicePort{
				{Name: "dns", Protocol: model.UDP, Port: 53},
				{Name: "dns-tcp", Protocol: model.TCP, Port: 53},
				{Name: "sig", Protocol: model.SCTP, Port: 2905},
				{Name: "bad", Protocol: 0, Port: 1},
			}},
			eps: []model.Endpoint{
				{Addr: modeltest.Addr("10.0.0.1"), Port: 5353, PortName: "dns", Protocol: model.UDP, Ready: true, Serving: true},
				{Addr: modeltest.Addr("10.0.0.1"), Port: 5354, PortName: "dns-tcp", Protocol: model.TCP, Ready: true, Serving: true},
				{Addr: modeltest.Addr("10.0.0.2"), Port: 5353, PortName: "dns", Protocol: model.TCP, Ready: true, Serving: true},
				{Addr: modeltest.Addr("10.0.0.3"), Port: 2905, PortName: "sig", Protocol: model.SCTP, Ready: true, Serving: true},
				{Addr: modeltest.Addr("10.0.0.4"), Port: 2905, PortName: "sig", Protocol: model.TCP, Ready: true, Serving: true},
			},
			want: &model.ServicePlan{Key: webKey, VirtualServices: []model.VirtualService{
				{VirtualServiceKey: model.VirtualServiceKey{Addr: modeltest.Addr("10.96.0.10"), Port: 53, Protocol: model.TCP},
					Kind: CIP, PortName: "dns-tcp", Scheduler: "rr",
					Destinations: []model.Destination{{Addr: modeltest.Addr("10.0.0.1"), Port: 5354, Weight: 1}}},
				{VirtualServiceKey: model.VirtualServiceKey{Addr: modeltest.Addr("10.96.0.10"), Port: 53, Protocol: model.UDP},
					Kind: CIP, PortName: "dns", Scheduler: "rr",
					Destinations: []model.Destination{{Addr: modeltest.Addr("10.0.0.1"), Port: 5353, Weight: 1}}},
				{VirtualServiceKey: model.VirtualServiceKey{Addr: modeltest.Addr("10.96.0.10"), Port: 2905, Protocol: model.SCTP},
					Kind: CIP, PortName: "sig", Scheduler: "rr",
					Destinations: []model.Destination{{Addr: modeltest.Addr("10.0.0.3"), Port: 2905, Weight: 1}}},
			}},
		},
		{
			name: "NodePort on every node address of the family, never loopback",
			svc: &model.Service{Key: webKey, Type: model.NodePort, ClusterIPs: modeltest.Addrs("10.96.0.10"),
				Ports: []model.ServicePort{{Name: "http", Protocol: model.TCP, Port: 80, NodePort: 30080}}},
			eps: []model.Endpoint{modeltest.Ready("10.0.0.1", "n2"), modeltest.Ready("fd01::1", "n2")},
			node: &model.Node{Name: "n1", Addresses: modeltest.Addrs("192.168.0.1", "127.0.0.1", "10.1.0.1", "fd00::1",
				"192.168.0.1")},
			want: &model.ServicePlan{Key: webKey, VirtualServices: []model.VirtualService{
				vs(NP, "10.1.0.1", 30080, dests("10.0.0.1")),
				vs(CIP, "10.96.0.10", 80, dests("10.0.0.1")),
				vs(NP, "192.168.0.1", 30080, dests("10.0.0.1")),
			}},
		},
		{
			name: "NodePort only on addresses inside NodePortAddresses",
			svc: &model.Service{Key: webKey, Type: model.NodePort, ClusterIPs: modeltest.Addrs("10.96.0.10", "fd96::10"),
				Ports: []model.ServicePort{{Name: "http", Protocol: model.TCP, Port: 80, NodePort: 30080}}},
			node: &model.Node{Name: "n1", Addresses: modeltest.Addrs("192.168.0.1", "10.1.0.1", "fd00::1", "fd02::1")},
			opts: &plan.Options{NodePortAddresses: modeltest.Prefixes("192.168.0.0/16", "fd02::/64")},
			want: &model.ServicePlan{Key: webKey, VirtualServices: []model.VirtualService{
				vs(CIP, "10.96.0.10", 80, nil),
				vs(NP, "192.168.0.1", 30080, nil),
				vs(NP, "fd02::1", 30080, nil),
				vs(CIP, "fd96::10", 80, nil),
			}},
		},
		{
			name: "NodePortAddresses without a prefix of a family allow every address of it",
			svc: &model.Service{Key: webKey, Type: model.NodePort, ClusterIPs: modeltest.Addrs("10.96.0.10", "fd96::10"),
				Ports: []model.ServicePort{{Name: "http", Protocol: model.TCP, Port: 80, NodePort: 30080}}},
			node: &model.Node{Name: "n1", Addresses: modeltest.Addrs("192.168.0.1", "10.1.0.1", "fd00::1", "fd02::1")},
			opts: &plan.Options{NodePortAddresses: modeltest.Prefixes("fd02::/64")},
			want: &model.ServicePlan{Key: webKey, VirtualServices: []model.VirtualService{
				vs(NP, "10.1.0.1", 30080, nil),
				vs(CIP, "10.96.0.10", 80, nil),
				vs(NP, "192.168.0.1", 30080, nil),
				vs(NP, "fd02::1", 30080, nil),
				vs(CIP, "fd96::10", 80, nil),
			}},
		},
		{
			name: "NodePortPrimary: the first InternalIP of each family, never an ExternalIP then",
			svc: &model.Service{Key: webKey, Type: model.NodePort, ClusterIPs: modeltest.Addrs("10.96.0.10", "fd96::10"),
				Ports: []model.ServicePort{{Name: "http", Protocol: model.TCP, Port: 80, NodePort: 30080}}},
			node: &model.Node{Name: "n1", Addresses: modeltest.Addrs("10.1.0.1", "192.168.0.1", "198.51.100.7", "fd00::1", "fd02::1"),
				StatusAddresses: []model.NodeAddress{
					{Type: model.NodeHostname, Address: "n1"},
					{Type: model.NodeExternalIP, Address: "198.51.100.7"},
					{Type: model.NodeInternalIP, Address: "fd02::1"},
					{Type: model.NodeInternalIP, Address: "192.168.0.1"},
					{Type: model.NodeInternalIP, Address: "10.1.0.1"},
					{Type: model.NodeInternalIP, Address: "fd00::1"},
				}},
			// A CIDR beside the keyword is ignored: the config refuses
			// the mix.
			opts: &plan.Options{NodePortPrimary: true, NodePortAddresses: modeltest.Prefixes("10.1.0.0/16")},
			want: &model.ServicePlan{Key: webKey, VirtualServices: []model.VirtualService{
				vs(CIP, "10.96.0.10", 80, nil),
				vs(NP, "192.168.0.1", 30080, nil),
				vs(NP, "fd02::1", 30080, nil),
				vs(CIP, "fd96::10", 80, nil),
			}},
		},
		{
			name: "NodePortPrimary: an ExternalIP when the family has no InternalIP, none for a family without either",
			svc: &model.Service{Key: webKey, Type: model.NodePort, ClusterIPs: modeltest.Addrs("10.96.0.10", "fd96::10"),
				Ports: []model.ServicePort{{Name: "http", Protocol: model.TCP, Port: 80, NodePort: 30080}}},
			node: &model.Node{Name: "n1", Addresses: modeltest.Addrs("198.51.100.7", "198.51.100.8"),
				StatusAddresses: []model.NodeAddress{
					{Type: model.NodeExternalIP, Address: "198.51.100.8"},
					{Type: model.NodeExternalIP, Address: "198.51.100.7"},
					{Type: model.NodeInternalDNS, Address: "n1.example"},
				}},
			opts: &plan.Options{NodePortPrimary: true},
			want: &model.ServicePlan{Key: webKey, VirtualServices: []model.VirtualService{
				vs(CIP, "10.96.0.10", 80, nil),
				vs(NP, "198.51.100.8", 30080, nil),
				vs(CIP, "fd96::10", 80, nil),
			}},
		},
		{
			name: "NodePortPrimary: a loopback primary carries no NodePort",
			svc: &model.Service{Key: webKey, Type: model.NodePort, ClusterIPs: modeltest.Addrs("10.96.0.10"),
				Ports: []model.ServicePort{{Name: "http", Protocol: model.TCP, Port: 80, NodePort: 30080}}},
			node: &model.Node{Name: "n1", Addresses: modeltest.Addrs("127.0.0.1", "192.168.0.1"),
				StatusAddresses: []model.NodeAddress{
					{Type: model.NodeInternalIP, Address: "127.0.0.1"},
					{Type: model.NodeInternalIP, Address: "192.168.0.1"},
				}},
			opts: &plan.Options{NodePortPrimary: true},
			want: &model.ServicePlan{Key: webKey, VirtualServices: []model.VirtualService{
				vs(CIP, "10.96.0.10", 80, nil),
			}},
		},
		{
			name: "unknown node: no NodePort, nothing local",
			svc: modeltest.With(modeltest.LoadBalancer(webKey, []string{"10.96.0.10"}, "198.51.100.1"), func(s *model.Service) {
				s.ExternalTrafficPolicy = model.PolicyLocal
			}),
			eps:    []model.Endpoint{modeltest.Ready("10.0.0.1", "n1"), modeltest.Ready("10.0.0.2", "")},
			noNode: true,
			want: &model.ServicePlan{Key: webKey, Announce: modeltest.Addrs("198.51.100.1"), VirtualServices: []model.VirtualService{
				vs(CIP, "10.96.0.10", 80, dests("10.0.0.1", "10.0.0.2")),
				withInternal(local(vs(LB, "198.51.100.1", 80, nil)), dests("10.0.0.1", "10.0.0.2")),
			}},
		},
		{
			name: "LoadBalancer: ingress IPs of the family with its source ranges, announced",
			svc: modeltest.With(modeltest.LoadBalancer(webKey, []string{"10.96.0.10"}, "198.51.100.2", "198.51.100.1", "2001:db8::1"), func(s *model.Service) {
				s.LoadBalancerSourceRanges = modeltest.Prefixes("203.0.113.7/24", "192.0.2.0/24", "203.0.113.0/24", "2001:db8:1::/48")
			}),
			eps: []model.Endpoint{modeltest.Ready("10.0.0.1", "n2")},
			want: &model.ServicePlan{Key: webKey, Announce: modeltest.Addrs("198.51.100.1", "198.51.100.2"),
				VirtualServices: []model.VirtualService{
					vs(CIP, "10.96.0.10", 80, dests("10.0.0.1")),
					vs(NP, "192.168.0.1", 30080, dests("10.0.0.1")),
					withRanges(vs(LB, "198.51.100.1", 80, dests("10.0.0.1")), "192.0.2.0/24", "203.0.113.0/24"),
					withRanges(vs(LB, "198.51.100.2", 80, dests("10.0.0.1")), "192.0.2.0/24", "203.0.113.0/24"),
				}},
		},
		{
			name: "LoadBalancer with two ports announces each address once",
			svc: modeltest.With(modeltest.LoadBalancer(webKey, []string{"10.96.0.10"}, "198.51.100.1"), func(s *model.Service) {
				s.Ports = append(s.Ports, model.ServicePort{Name: "https", Protocol: model.TCP, Port: 443})
			}),
			node: &model.Node{Name: "n1"},
			want: &model.ServicePlan{Key: webKey, Announce: modeltest.Addrs("198.51.100.1"), VirtualServices: []model.VirtualService{
				vs(model.FrontendClusterIP, "10.96.0.10", 80, nil),
				{VirtualServiceKey: model.VirtualServiceKey{Addr: modeltest.Addr("10.96.0.10"), Port: 443, Protocol: model.TCP},
					Kind: CIP, PortName: "https", Scheduler: "rr"},
				vs(LB, "198.51.100.1", 80, nil),
				{VirtualServiceKey: model.VirtualServiceKey{Addr: modeltest.Addr("198.51.100.1"), Port: 443, Protocol: model.TCP},
					Kind: LB, PortName: "https", Scheduler: "rr"},
			}},
		},
		{
			name: "LoadBalancer: a /0 source range allows everyone; another family's ranges do not apply",
			svc: modeltest.With(modeltest.LoadBalancer(webKey, []string{"10.96.0.10", "fd96::10"}, "198.51.100.1", "2001:db8::1"), func(s *model.Service) {
				s.LoadBalancerSourceRanges = modeltest.Prefixes("0.0.0.0/0", "192.0.2.0/24")
			}),
			node: &model.Node{Name: "n1"},
			want: &model.ServicePlan{Key: webKey, Announce: modeltest.Addrs("198.51.100.1", "2001:db8::1"),
				VirtualServices: []model.VirtualService{
					vs(CIP, "10.96.0.10", 80, nil),
					vs(LB, "198.51.100.1", 80, nil),
					vs(LB, "2001:db8::1", 80, nil),
					vs(CIP, "fd96::10", 80, nil),
				}},
		},
		{
			name: "LoadBalancer of a foreign class: proxied, not announced",
			svc: modeltest.With(modeltest.LoadBalancer(webKey, []string{"10.96.0.10"}, "198.51.100.1"), func(s *model.Service) {
				s.LoadBalancerClass = "example.com/other"
			}),
			node: &model.Node{Name: "n1"},
			want: &model.ServicePlan{Key: webKey, VirtualServices: []model.VirtualService{
				vs(CIP, "10.96.0.10", 80, nil),
				vs(LB, "198.51.100.1", 80, nil),
			}},
		},
		{
			name: "LoadBalancer of our configured class is announced",
			svc: modeltest.With(modeltest.LoadBalancer(webKey, []string{"10.96.0.10"}, "198.51.100.1"), func(s *model.Service) {
				s.LoadBalancerClass = "example.com/ours"
			}),
			node: &model.Node{Name: "n1"},
			opts: &plan.Options{LoadBalancerClass: "example.com/ours", IgnoreUnclassed: true},
			want: &model.ServicePlan{Key: webKey, Announce: modeltest.Addrs("198.51.100.1"), VirtualServices: []model.VirtualService{
				vs(CIP, "10.96.0.10", 80, nil),
				vs(LB, "198.51.100.1", 80, nil),
			}},
		},
		{
			name: "LoadBalancer of the default class is announced",
			svc: modeltest.With(modeltest.LoadBalancer(webKey, []string{"10.96.0.10"}, "198.51.100.1"), func(s *model.Service) {
				s.LoadBalancerClass = "switchyard.dev/lb"
			}),
			node: &model.Node{Name: "n1"},
			want: &model.ServicePlan{Key: webKey, Announce: modeltest.Addrs("198.51.100.1"), VirtualServices: []model.VirtualService{
				vs(CIP, "10.96.0.10", 80, nil),
				vs(LB, "198.51.100.1", 80, nil),
			}},
		},
		{
			name: "unclassed LoadBalancer with IgnoreUnclassed: proxied, not announced",
			svc:  modeltest.LoadBalancer(webKey, []string{"10.96.0.10"}, "198.51.100.1"),
			node: &model.Node{Name: "n1"},
			opts: &plan.Options{IgnoreUnclassed: true},
			want: &model.ServicePlan{Key: webKey, VirtualServices: []model.VirtualService{
				vs(CIP, "10.96.0.10", 80, nil),
				vs(LB, "198.51.100.1", 80, nil),
			}},
		},
		{
			name: "external IPs; one equal to an ingress IP keeps the LoadBalancer frontend",
			svc: modeltest.With(modeltest.ClusterIP(webKey, "10.96.0.10"), func(s *model.Service) {
				s.ExternalIPs = modeltest.Addrs("203.0.113.9", "198.51.100.1", "2001:db8::9")
				s.LoadBalancerIPs = modeltest.Addrs("198.51.100.1")
				s.LoadBalancerSourceRanges = modeltest.Prefixes("192.0.2.0/24")
			}),
			eps: []model.Endpoint{modeltest.Ready("10.0.0.1", "n2")},
			want: &model.ServicePlan{Key: webKey, VirtualServices: []model.VirtualService{
				vs(CIP, "10.96.0.10", 80, dests("10.0.0.1")),
				withRanges(vs(LB, "198.51.100.1", 80, dests("10.0.0.1")), "192.0.2.0/24"),
				vs(EIP, "203.0.113.9", 80, dests("10.0.0.1")),
			}},
		},
		{
			name: "dual-stack: every family's frontends use that family's endpoints",
			svc: modeltest.With(modeltest.LoadBalancer(webKey, []string{"10.96.0.10", "fd96::10"}, "198.51.100.1", "2001:db8::1"), func(s *model.Service) {
				s.ExternalIPs = modeltest.Addrs("203.0.113.9", "2001:db8::9")
			}),
			eps: []model.Endpoint{modeltest.Ready("10.0.0.1", "n2"), modeltest.Ready("fd01::1", "n2"), modeltest.Ready("fd01::2", "n1")},
			want: &model.ServicePlan{Key: webKey, Announce: modeltest.Addrs("198.51.100.1", "2001:db8::1"),
				VirtualServices: []model.VirtualService{
					vs(CIP, "10.96.0.10", 80, dests("10.0.0.1")),
					vs(NP, "192.168.0.1", 30080, dests("10.0.0.1")),
					vs(LB, "198.51.100.1", 80, dests("10.0.0.1")),
					vs(EIP, "203.0.113.9", 80, dests("10.0.0.1")),
					vs(LB, "2001:db8::1", 80, dests("fd01::1", "fd01::2")),
					vs(EIP, "2001:db8::9", 80, dests("fd01::1", "fd01::2")),
					vs(NP, "fd00::1", 30080, dests("fd01::1", "fd01::2")),
					vs(CIP, "fd96::10", 80, dests("fd01::1", "fd01::2")),
				}},
		},
		{
			name: "IPv6-only: no IPv4 frontends even with IPv4 ingress, external IPs and endpoints",
			svc: modeltest.With(modeltest.LoadBalancer(webKey, []string{"fd96::10"}, "198.51.100.1", "2001:db8::1"), func(s *model.Service) {
				s.ExternalIPs = modeltest.Addrs("203.0.113.9")
			}),
			eps: []model.Endpoint{modeltest.Ready("10.0.0.1", "n2"), modeltest.Ready("fd01::1", "n2")},
			want: &model.ServicePlan{Key: webKey, Announce: modeltest.Addrs("2001:db8::1"), VirtualServices: []model.VirtualService{
				vs(LB, "2001:db8::1", 80, dests("fd01::1")),
				vs(NP, "fd00::1", 30080, dests("fd01::1")),
				vs(CIP, "fd96::10", 80, dests("fd01::1")),
			}},
		},
		{
			name: "sessionAffinity ClientIP sets the timeout on every frontend",
			svc: modeltest.With(modeltest.LoadBalancer(webKey, []string{"10.96.0.10"}, "198.51.100.1"), func(s *model.Service) {
				s.AffinityTimeout = 3 * time.Hour
			}),
			node: &model.Node{Name: "n1"},
			want: &model.ServicePlan{Key: webKey, Announce: modeltest.Addrs("198.51.100.1"), VirtualServices: []model.VirtualService{
				withAffinity(vs(CIP, "10.96.0.10", 80, nil), 3*time.Hour),
				withAffinity(vs(LB, "198.51.100.1", 80, nil), 3*time.Hour),
			}},
		},
		{
			name: "scheduler annotation naming a scheduler IPVS supports wins",
			svc:  modeltest.With(modeltest.ClusterIP(webKey, "10.96.0.10"), func(s *model.Service) { s.Scheduler = "mh" }),
			opts: &plan.Options{Scheduler: "wlc", Schedulers: dryrun.New()},
			want: &model.ServicePlan{Key: webKey, VirtualServices: []model.VirtualService{
				withScheduler(vs(CIP, "10.96.0.10", 80, nil), "mh"),
			}},
		},
		{
			name: "invalid scheduler annotation falls back to the configured scheduler",
			svc:  modeltest.With(modeltest.ClusterIP(webKey, "10.96.0.10"), func(s *model.Service) { s.Scheduler = "fastest" }),
			opts: &plan.Options{Scheduler: "wlc", Schedulers: dryrun.New()},
			want: &model.ServicePlan{Key: webKey, VirtualServices: []model.VirtualService{
				withScheduler(vs(CIP, "10.96.0.10", 80, nil), "wlc"),
			}},
		},
		{
			name: "scheduler annotation IPVS accepts but the dataplane does not falls back",
			svc:  modeltest.With(modeltest.ClusterIP(webKey, "10.96.0.10"), func(s *model.Service) { s.Scheduler = "mh" }),
			opts: &plan.Options{Scheduler: "wlc", Schedulers: plugintest.NewSchedulers("rr", "wrr", "wlc")},
			want: &model.ServicePlan{Key: webKey, VirtualServices: []model.VirtualService{
				withScheduler(vs(CIP, "10.96.0.10", 80, nil), "wlc"),
			}},
		},
		{
			name: "scheduler annotation the smaller set supports wins",
			svc:  modeltest.With(modeltest.ClusterIP(webKey, "10.96.0.10"), func(s *model.Service) { s.Scheduler = "wrr" }),
			opts: &plan.Options{Scheduler: "wlc", Schedulers: plugintest.NewSchedulers("rr", "wrr", "wlc")},
			want: &model.ServicePlan{Key: webKey, VirtualServices: []model.VirtualService{
				withScheduler(vs(CIP, "10.96.0.10", 80, nil), "wrr"),
			}},
		},
		{
			name: "without the dataplane's schedulers an annotation falls back",
			svc:  modeltest.With(modeltest.ClusterIP(webKey, "10.96.0.10"), func(s *model.Service) { s.Scheduler = "mh" }),
			opts: &plan.Options{Scheduler: "wlc"},
			want: &model.ServicePlan{Key: webKey, VirtualServices: []model.VirtualService{
				withScheduler(vs(CIP, "10.96.0.10", 80, nil), "wlc"),
			}},
		},
		{
			name: "terminating endpoints unused while one is ready",
			svc:  modeltest.ClusterIP(webKey, "10.96.0.10"),
			eps:  []model.Endpoint{modeltest.Terminating("10.0.0.1", "n1"), modeltest.Ready("10.0.0.2", "n2"), modeltest.Stopped("10.0.0.3", "n2")},
			want: &model.ServicePlan{Key: webKey, VirtualServices: []model.VirtualService{
				vs(CIP, "10.96.0.10", 80, dests("10.0.0.2")),
			}},
		},
		{
			name: "serving terminating endpoints used when none is ready; non-serving never",
			svc:  modeltest.ClusterIP(webKey, "10.96.0.10"),
			eps: []model.Endpoint{modeltest.Terminating("10.0.0.2", "n2"), modeltest.Terminating("10.0.0.1", "n1"),
				modeltest.Stopped("10.0.0.3", "n2"), modeltest.NotReady("10.0.0.4", "n2")},
			want: &model.ServicePlan{Key: webKey, VirtualServices: []model.VirtualService{
				vs(CIP, "10.96.0.10", 80, dests("10.0.0.1", "10.0.0.2")),
			}},
		},
		{
			name: "terminating fallback is per family",
			svc:  modeltest.ClusterIP(webKey, "10.96.0.10", "fd96::10"),
			eps:  []model.Endpoint{modeltest.Ready("10.0.0.1", "n2"), modeltest.Terminating("10.0.0.2", "n2"), modeltest.Terminating("fd01::2", "n2")},
			want: &model.ServicePlan{Key: webKey, VirtualServices: []model.VirtualService{
				vs(CIP, "10.96.0.10", 80, dests("10.0.0.1")),
				vs(CIP, "fd96::10", 80, dests("fd01::2")),
			}},
		},
		{
			name: "health check: distinct ready local addresses of a LoadBalancer with ETP Local",
			svc: modeltest.With(modeltest.LoadBalancer(webKey, []string{"10.96.0.10"}), func(s *model.Service) {
				s.ExternalTrafficPolicy = model.PolicyLocal
				s.HealthCheckNodePort = 32000
				s.Ports = append(s.Ports, model.ServicePort{Name: "https", Protocol: model.TCP, Port: 443})
			}),
			eps: func() []model.Endpoint {
				https := modeltest.Ready("10.0.0.1", "n1")
				https.PortName, https.Port = "https", 8443
				return []model.Endpoint{modeltest.Ready("10.0.0.1", "n1"), https, modeltest.Ready("10.0.0.2", "n1"),
					modeltest.Terminating("10.0.0.3", "n1"), modeltest.Ready("10.0.0.4", "n2")}
			}(),
			node: &model.Node{Name: "n1"},
			want: &model.ServicePlan{Key: webKey, HealthCheckNodePort: 32000, LocalEndpoints: 2,
				VirtualServices: []model.VirtualService{
					vs(CIP, "10.96.0.10", 80, dests("10.0.0.1", "10.0.0.2", "10.0.0.4")),
					{VirtualServiceKey: model.VirtualServiceKey{Addr: modeltest.Addr("10.96.0.10"), Port: 443, Protocol: model.TCP},
						Kind: CIP, PortName: "https", Scheduler: "rr",
						Destinations: []model.Destination{{Addr: modeltest.Addr("10.0.0.1"), Port: 8443, Weight: 1}}},
				}},
		},
		{
			name: "health check: a dual-stack pod counts once",
			svc: modeltest.With(modeltest.LoadBalancer(webKey, []string{"10.96.0.10", "fd96::10"}), func(s *model.Service) {
				s.ExternalTrafficPolicy = model.PolicyLocal
				s.HealthCheckNodePort = 32000
				s.Ports[0].NodePort = 0
			}),
			eps:  []model.Endpoint{modeltest.Ready("10.0.0.1", "n1"), modeltest.Ready("fd01::1", "n1")},
			node: &model.Node{Name: "n1"},
			want: &model.ServicePlan{Key: webKey, HealthCheckNodePort: 32000, LocalEndpoints: 1,
				VirtualServices: []model.VirtualService{
					vs(CIP, "10.96.0.10", 80, dests("10.0.0.1")),
					vs(CIP, "fd96::10", 80, dests("fd01::1")),
				}},
		},
		{
			name: "health check: none for a NodePort Service with ETP Local",
			svc: &model.Service{Key: webKey, Type: model.NodePort, ClusterIPs: modeltest.Addrs("10.96.0.10"),
				ExternalTrafficPolicy: model.PolicyLocal, HealthCheckNodePort: 32000,
				Ports: []model.ServicePort{{Name: "http", Protocol: model.TCP, Port: 80, NodePort: 30080}}},
			eps: []model.Endpoint{modeltest.Ready("10.0.0.1", "n1"), modeltest.Ready("10.0.0.2", "n2")},
			want: &model.ServicePlan{Key: webKey, VirtualServices: []model.VirtualService{
				vs(CIP, "10.96.0.10", 80, dests("10.0.0.1", "10.0.0.2")),
				local(vs(NP, "192.168.0.1", 30080, dests("10.0.0.1"))),
			}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node := tt.node
			if node == nil && !tt.noNode {
				node = thisNode()
			}
			got := plan.PlanService(tt.svc, tt.eps, node, tt.opts)
			if d := diff(tt.want, got); d != "" {
				t.Errorf("PlanService() mismatch (-want +got):\n%s", d)
			}
		})
	}
}

// TestPlanServiceTrafficPolicies covers every externalTrafficPolicy x
// internalTrafficPolicy combination against endpoint sets with and without
// local, ready and terminating endpoints. The frontends are a ClusterIP, a
// NodePort and a LoadBalancer IP.
func TestPlanServiceTrafficPolicies(t *testing.T) {
	sets := []struct {
		name string
		eps  []model.Endpoint
		// cluster and local are the destinations of the cluster-wide and
		// the node-local set; localReady is the health check count.
		cluster, local []model.Destination
		localReady     int
	}{
		{
			name:       "local and remote ready",
			eps:        []model.Endpoint{modeltest.Ready("10.0.0.1", "n1"), modeltest.Ready("10.0.0.2", "n2"), modeltest.Terminating("10.0.0.3", "n1")},
			cluster:    dests("10.0.0.1", "10.0.0.2"),
			local:      dests("10.0.0.1"),
			localReady: 1,
		},
		{
			name:    "only remote endpoints",
			eps:     []model.Endpoint{modeltest.Ready("10.0.0.2", "n2"), modeltest.Terminating("10.0.0.3", "n2")},
			cluster: dests("10.0.0.2"),
		},
		{
			name:    "local terminating, remote ready",
			eps:     []model.Endpoint{modeltest.Terminating("10.0.0.1", "n1"), modeltest.Ready("10.0.0.2", "n2")},
			cluster: dests("10.0.0.2"),
			local:   dests("10.0.0.1"),
		},
		{
			name:    "only terminating endpoints",
			eps:     []model.Endpoint{modeltest.Terminating("10.0.0.1", "n1"), modeltest.Terminating("10.0.0.2", "n2"), modeltest.Stopped("10.0.0.3", "n1")},
			cluster: dests("10.0.0.1", "10.0.0.2"),
			local:   dests("10.0.0.1"),
		},
		{
			name: "no usable endpoints",
			eps:  []model.Endpoint{modeltest.NotReady("10.0.0.1", "n1"), modeltest.Stopped("10.0.0.2", "n2")},
		},
	}
	policies := []model.TrafficPolicy{model.PolicyCluster, model.PolicyLocal}
	for _, etp := range policies {
		for _, itp := range policies {
			for _, set := range sets {
				t.Run("ETP="+etp.String()+"/ITP="+itp.String()+"/"+set.name, func(t *testing.T) {
					svc := modeltest.LoadBalancer(webKey, []string{"10.96.0.10"}, "198.51.100.1")
					svc.ExternalTrafficPolicy, svc.InternalTrafficPolicy = etp, itp
					svc.HealthCheckNodePort = 32000

					internal, external := set.cluster, set.cluster
					if itp == model.PolicyLocal {
						internal = set.local
					}
					want := &model.ServicePlan{Key: webKey, Announce: modeltest.Addrs("198.51.100.1")}
					lb := vs(model.FrontendLoadBalancer, "198.51.100.1", 80, external)
					np := vs(model.FrontendNodePort, "192.168.0.1", 30080, external)
					if etp == model.PolicyLocal {
						// In-cluster clients of the LoadBalancer IP get
						// every endpoint, whatever ITP says; the NodePort's
						// get the local ones.
						lb = withInternal(local(vs(model.FrontendLoadBalancer, "198.51.100.1", 80, set.local)), set.cluster)
						np = local(vs(model.FrontendNodePort, "192.168.0.1", 30080, set.local))
						want.HealthCheckNodePort, want.LocalEndpoints = 32000, set.localReady
					}
					want.VirtualServices = []model.VirtualService{
						vs(model.FrontendClusterIP, "10.96.0.10", 80, internal), np, lb,
					}

					got := plan.PlanService(svc, set.eps, &model.Node{Name: "n1", Addresses: modeltest.Addrs("192.168.0.1")}, nil)
					if d := diff(want, got); d != "" {
						t.Errorf("PlanService() mismatch (-want +got):\n%s", d)
					}
				})
			}
		}
	}
}

// TestPlanServiceInternal covers VirtualService.Internal: the endpoints
// of in-cluster traffic to a Local LoadBalancer or external IP frontend
// are the cluster-wide ones, topology hints applied, whatever
// internalTrafficPolicy says; nothing else carries them.
func TestPlanServiceInternal(t *testing.T) {
	const (
		CIP = model.FrontendClusterIP
		NP  = model.FrontendNodePort
		LB  = model.FrontendLoadBalancer
		EIP = model.FrontendExternalIP
	)
	svc := func(etp, itp model.TrafficPolicy) *model.Service {
		s := modeltest.LoadBalancer(webKey, []string{"10.96.0.10"}, "198.51.100.1")
		s.ExternalIPs = modeltest.Addrs("203.0.113.1")
		s.ExternalTrafficPolicy, s.InternalTrafficPolicy = etp, itp
		return s
	}
	tests := []struct {
		name string
		svc  *model.Service
		eps  []model.Endpoint
		want []model.VirtualService
	}{
		{
			name: "ETP Cluster: no internal set",
			svc:  svc(model.PolicyCluster, model.PolicyCluster),
			eps:  []model.Endpoint{modeltest.Ready("10.0.0.2", "n2")},
			want: []model.VirtualService{
				vs(CIP, "10.96.0.10", 80, dests("10.0.0.2")),
				vs(NP, "192.168.0.1", 30080, dests("10.0.0.2")),
				vs(LB, "198.51.100.1", 80, dests("10.0.0.2")),
				vs(EIP, "203.0.113.1", 80, dests("10.0.0.2")),
			},
		},
		{
			name: "ETP Local, no local endpoint: LoadBalancer and external IP reach the remote one from inside",
			svc:  svc(model.PolicyLocal, model.PolicyCluster),
			eps:  []model.Endpoint{modeltest.Ready("10.0.0.2", "n2"), modeltest.NotReady("10.0.0.3", "n2")},
			want: []model.VirtualService{
				vs(CIP, "10.96.0.10", 80, dests("10.0.0.2")),
				local(vs(NP, "192.168.0.1", 30080, nil)),
				withInternal(local(vs(LB, "198.51.100.1", 80, nil)), dests("10.0.0.2")),
				withInternal(local(vs(EIP, "203.0.113.1", 80, nil)), dests("10.0.0.2")),
			},
		},
		{
			name: "ETP and ITP Local: the internal set is still cluster-wide",
			svc:  svc(model.PolicyLocal, model.PolicyLocal),
			eps:  []model.Endpoint{modeltest.Ready("10.0.0.1", "n1"), modeltest.Ready("10.0.0.2", "n2")},
			want: []model.VirtualService{
				vs(CIP, "10.96.0.10", 80, dests("10.0.0.1")),
				local(vs(NP, "192.168.0.1", 30080, dests("10.0.0.1"))),
				withInternal(local(vs(LB, "198.51.100.1", 80, dests("10.0.0.1"))), dests("10.0.0.1", "10.0.0.2")),
				withInternal(local(vs(EIP, "203.0.113.1", 80, dests("10.0.0.1"))), dests("10.0.0.1", "10.0.0.2")),
			},
		},
		{
			name: "zone hints narrow the internal set as they narrow the ClusterIP's",
			svc:  svc(model.PolicyLocal, model.PolicyCluster),
			eps: []model.Endpoint{
				zoneHints(modeltest.Ready("10.0.0.2", "n2"), "z1"),
				zoneHints(modeltest.Ready("10.0.0.3", "n3"), "z2"),
			},
			want: []model.VirtualService{
				vs(CIP, "10.96.0.10", 80, dests("10.0.0.2")),
				local(vs(NP, "192.168.0.1", 30080, nil)),
				withInternal(local(vs(LB, "198.51.100.1", 80, nil)), dests("10.0.0.2")),
				withInternal(local(vs(EIP, "203.0.113.1", 80, nil)), dests("10.0.0.2")),
			},
		},
		{
			name: "no usable endpoint: no internal set either",
			svc:  svc(model.PolicyLocal, model.PolicyCluster),
			eps:  []model.Endpoint{modeltest.NotReady("10.0.0.2", "n2")},
			want: []model.VirtualService{
				vs(CIP, "10.96.0.10", 80, nil),
				local(vs(NP, "192.168.0.1", 30080, nil)),
				local(vs(LB, "198.51.100.1", 80, nil)),
				local(vs(EIP, "203.0.113.1", 80, nil)),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := plan.PlanService(tt.svc, tt.eps, &model.Node{Name: "n1", Zone: "z1", Addresses: modeltest.Addrs("192.168.0.1")}, nil)
			want := &model.ServicePlan{Key: webKey, Announce: modeltest.Addrs("198.51.100.1"), VirtualServices: tt.want}
			if d := diff(want, got); d != "" {
				t.Errorf("PlanService() mismatch (-want +got):\n%s", d)
			}
		})
	}
}

// TestPlanServiceTopology covers topology hints: zone hints, node hints
// (PreferSameNode) and every fallback, with the trafficDistribution that
// makes the EndpointSlice controller write them.
func TestPlanServiceTopology(t *testing.T) {
	tests := []struct {
		name         string
		distribution string
		itp, etp     model.TrafficPolicy
		eps          []model.Endpoint
		node         *model.Node
		// internal is the ClusterIP's destinations, external the NodePort's.
		internal, external []model.Destination
	}{
		{
			name:         "no hints: every ready endpoint",
			distribution: model.DistributionPreferClose,
			eps:          []model.Endpoint{modeltest.Ready("10.0.0.1", "n1"), modeltest.Ready("10.0.0.2", "n2")},
			internal:     dests("10.0.0.1", "10.0.0.2"),
			external:     dests("10.0.0.1", "10.0.0.2"),
		},
		{
			name:         "zone hints: only endpoints hinted for this zone",
			distribution: model.DistributionPreferSameZone,
			eps: []model.Endpoint{
				zoneHints(modeltest.Ready("10.0.0.1", "n2"), "z1"),
				zoneHints(modeltest.Ready("10.0.0.2", "n3"), "z2"),
				zoneHints(modeltest.Ready("10.0.0.3", "n4"), "z2", "z1"),
				modeltest.NotReady("10.0.0.4", "n5"), // unhinted but not ready: ignored
			},
			internal: dests("10.0.0.1", "10.0.0.3"),
			external: dests("10.0.0.1", "10.0.0.3"),
		},
		{
			name:         "zone hints apply whatever trafficDistribution says, as in kube-proxy",
			distribution: "",
			eps: []model.Endpoint{
				zoneHints(modeltest.Ready("10.0.0.1", "n2"), "z1"),
				zoneHints(modeltest.Ready("10.0.0.2", "n3"), "z2"),
			},
			internal: dests("10.0.0.1"),
			external: dests("10.0.0.1"),
		},
		{
			name:         "a ready endpoint without a zone hint: hints ignored",
			distribution: model.DistributionPreferClose,
			eps: []model.Endpoint{
				zoneHints(modeltest.Ready("10.0.0.1", "n2"), "z1"),
				modeltest.Ready("10.0.0.2", "n3"),
			},
			internal: dests("10.0.0.1", "10.0.0.2"),
			external: dests("10.0.0.1", "10.0.0.2"),
		},
		{
			name:         "no endpoint hinted for this zone: hints ignored",
			distribution: model.DistributionPreferClose,
			eps: []model.Endpoint{
				zoneHints(modeltest.Ready("10.0.0.1", "n2"), "z2"),
				zoneHints(modeltest.Ready("10.0.0.2", "n3"), "z3"),
			},
			internal: dests("10.0.0.1", "10.0.0.2"),
			external: dests("10.0.0.1", "10.0.0.2"),
		},
		{
			name:         "node without a zone: hints ignored",
			distribution: model.DistributionPreferClose,
			node:         &model.Node{Name: "n1", Addresses: modeltest.Addrs("192.168.0.1")},
			eps: []model.Endpoint{
				zoneHints(modeltest.Ready("10.0.0.1", "n2"), "z1"),
				zoneHints(modeltest.Ready("10.0.0.2", "n3"), "z2"),
			},
			internal: dests("10.0.0.1", "10.0.0.2"),
			external: dests("10.0.0.1", "10.0.0.2"),
		},
		{
			name:         "only terminating endpoints: hints ignored",
			distribution: model.DistributionPreferClose,
			eps: []model.Endpoint{
				zoneHints(modeltest.Terminating("10.0.0.1", "n2"), "z1"),
				zoneHints(modeltest.Terminating("10.0.0.2", "n3"), "z2"),
			},
			internal: dests("10.0.0.1", "10.0.0.2"),
			external: dests("10.0.0.1", "10.0.0.2"),
		},
		{
			name:         "node hints: only endpoints hinted for this node",
			distribution: model.DistributionPreferSameNode,
			eps: []model.Endpoint{
				nodeHints(zoneHints(modeltest.Ready("10.0.0.1", "n1"), "z1"), "n1"),
				nodeHints(zoneHints(modeltest.Ready("10.0.0.2", "n2"), "z1"), "n2"),
				nodeHints(zoneHints(modeltest.Ready("10.0.0.3", "n3"), "z2"), "n3"),
			},
			internal: dests("10.0.0.1"),
			external: dests("10.0.0.1"),
		},
		{
			name:         "node hints, none for this node: zone hints",
			distribution: model.DistributionPreferSameNode,
			eps: []model.Endpoint{
				nodeHints(zoneHints(modeltest.Ready("10.0.0.2", "n2"), "z1"), "n2"),
				nodeHints(zoneHints(modeltest.Ready("10.0.0.3", "n3"), "z2"), "n3"),
			},
			internal: dests("10.0.0.2"),
			external: dests("10.0.0.2"),
		},
		{
			name:         "a ready endpoint without a node hint: zone hints",
			distribution: model.DistributionPreferSameNode,
			eps: []model.Endpoint{
				nodeHints(zoneHints(modeltest.Ready("10.0.0.1", "n1"), "z1"), "n1"),
				zoneHints(modeltest.Ready("10.0.0.2", "n2"), "z1"),
				zoneHints(modeltest.Ready("10.0.0.3", "n3"), "z2"),
			},
			internal: dests("10.0.0.1", "10.0.0.2"),
			external: dests("10.0.0.1", "10.0.0.2"),
		},
		{
			name:         "ITP Local: ClusterIP uses local endpoints whatever their hints",
			distribution: model.DistributionPreferClose,
			itp:          model.PolicyLocal,
			eps: []model.Endpoint{
				zoneHints(modeltest.Ready("10.0.0.1", "n1"), "z2"),
				zoneHints(modeltest.Ready("10.0.0.2", "n2"), "z1"),
			},
			internal: dests("10.0.0.1"),
			external: dests("10.0.0.2"),
		},
		{
			name:         "ETP Local: external frontends use local endpoints whatever their hints",
			distribution: model.DistributionPreferClose,
			etp:          model.PolicyLocal,
			eps: []model.Endpoint{
				zoneHints(modeltest.Ready("10.0.0.1", "n1"), "z2"),
				zoneHints(modeltest.Ready("10.0.0.2", "n2"), "z1"),
			},
			internal: dests("10.0.0.2"),
			external: dests("10.0.0.1"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := &model.Service{Key: webKey, Type: model.NodePort, ClusterIPs: modeltest.Addrs("10.96.0.10"),
				TrafficDistribution: tt.distribution, InternalTrafficPolicy: tt.itp, ExternalTrafficPolicy: tt.etp,
				Ports: []model.ServicePort{{Name: "http", Protocol: model.TCP, Port: 80, NodePort: 30080}}}
			node := tt.node
			if node == nil {
				node = &model.Node{Name: "n1", Zone: "z1", Addresses: modeltest.Addrs("192.168.0.1")}
			}
			np := vs(model.FrontendNodePort, "192.168.0.1", 30080, tt.external)
			np.Local = tt.etp == model.PolicyLocal
			want := &model.ServicePlan{Key: webKey, VirtualServices: []model.VirtualService{
				vs(model.FrontendClusterIP, "10.96.0.10", 80, tt.internal), np,
			}}
			got := plan.PlanService(svc, tt.eps, node, nil)
			if d := diff(want, got); d != "" {
				t.Errorf("PlanService() mismatch (-want +got):\n%s", d)
			}
		})
	}
}

// TestPlanServiceDeterministic checks that the order of the inputs does not
// matter and that frontends share no memory.
func TestPlanServiceDeterministic(t *testing.T) {
	svc := modeltest.LoadBalancer(webKey, []string{"10.96.0.10", "fd96::10"}, "198.51.100.1", "198.51.100.2", "2001:db8::1")
	svc.ExternalIPs = modeltest.Addrs("203.0.113.9", "2001:db8::9")
	svc.LoadBalancerSourceRanges = modeltest.Prefixes("192.0.2.0/24", "203.0.113.0/24", "2001:db8:1::/48")
	var eps []model.Endpoint
	for _, a := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "fd01::1", "fd01::2", "fd01::3"} {
		eps = append(eps, modeltest.Ready(a, "n2"))
	}
	want := plan.PlanService(svc, eps, thisNode(), nil)

	r := rand.New(rand.NewPCG(1, 2))
	for i := range 20 {
		s := *svc
		s.LoadBalancerIPs = slices.Clone(s.LoadBalancerIPs)
		s.ExternalIPs = slices.Clone(s.ExternalIPs)
		s.LoadBalancerSourceRanges = slices.Clone(s.LoadBalancerSourceRanges)
		shuffled := slices.Clone(eps)
		r.Shuffle(len(s.LoadBalancerIPs), func(i, j int) {
			s.LoadBalancerIPs[i], s.LoadBalancerIPs[j] = s.LoadBalancerIPs[j], s.LoadBalancerIPs[i]
		})
		r.Shuffle(len(s.ExternalIPs), func(i, j int) { s.ExternalIPs[i], s.ExternalIPs[j] = s.ExternalIPs[j], s.ExternalIPs[i] })
		r.Shuffle(len(s.LoadBalancerSourceRanges), func(i, j int) {
			s.LoadBalancerSourceRanges[i], s.LoadBalancerSourceRanges[j] = s.LoadBalancerSourceRanges[j], s.LoadBalancerSourceRanges[i]
		})
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		node := thisNode()
		slices.Reverse(node.Addresses)
		got := plan.PlanService(&s, shuffled, node, nil)
		if d := diff(want, got); d != "" {
			t.Fatalf("shuffle %d: PlanService() mismatch (-want +got):\n%s", i, d)
		}
		if !want.Equal(got) {
			t.Fatalf("shuffle %d: ServicePlan.Equal() = false for plans cmp finds equal", i)
		}
	}

	// Writing one frontend's slices must not change another's.
	got := plan.PlanService(svc, eps, thisNode(), nil)
	for i := range got.VirtualServices {
		v := &got.VirtualServices[i]
		for j := range v.Destinations {
			v.Destinations[j].Weight = 7
		}
		for j := range v.SourceRanges {
			v.SourceRanges[j] = netip.MustParsePrefix("0.0.0.0/32")
		}
		for k, other := range got.VirtualServices {
			if k == i {
				continue
			}
			if slices.ContainsFunc(other.Destinations, func(d model.Destination) bool { return d.Weight == 7 }) ||
				slices.Contains(other.SourceRanges, netip.MustParsePrefix("0.0.0.0/32")) {
				t.Fatalf("frontends %v and %v share memory", v.VirtualServiceKey, other.VirtualServiceKey)
			}
		}
		got = plan.PlanService(svc, eps, thisNode(), nil)
	}
}

func TestPlanServiceNil(t *testing.T) {
	if got := plan.PlanService(nil, []model.Endpoint{modeltest.Ready("10.0.0.1", "n1")}, thisNode(), nil); got != nil {
		t.Errorf("PlanService(nil) = %+v, want nil", got)
	}
}
