// Package plan owns pure planning: it turns the watched Services, their
// endpoints and this node into the desired state of the dataplane and the
// announcers (model.ServicePlan), with kube-proxy's semantics.
//
// PlanService plans one Service; Arbitrate shares out the keys several
// Services ask for. Planner keeps every Service's last input
// and plan, replans only what an Update can affect and reports the Services
// whose plan really changed, so that the reconcile loop's work grows with
// what changed, not with the size of the cluster.
//
// The rules, as kube-proxy applies them (pkg/proxy: serviceport.go,
// topology.go, endpointsmap.go, util/nodeport_addresses.go):
//
//   - ExternalName and headless Services, and Services of a type the watch
//     layer did not know (Type zero), are not proxied (Rejected says why).
//   - Each IP family in which the Service has a cluster IP is planned on its
//     own: ClusterIP, NodePort (node addresses of that family inside
//     Options.NodePortAddresses; every address of the family when no prefix
//     of the family is configured; only the node's primary IP of the family,
//     its first InternalIP else its first ExternalIP, with
//     Options.NodePortPrimary; never loopback), LoadBalancer ingress IPs
//     and external IPs of that family, with endpoints of that family.
//   - Endpoints match a port by name and protocol. Ready endpoints are used;
//     serving and terminating ones only when none is ready, decided
//     separately for the cluster-wide and the node-local set.
//   - internalTrafficPolicy Local makes ClusterIP frontends use node-local
//     endpoints; externalTrafficPolicy Local makes NodePort, LoadBalancer
//     and external IP frontends use them (and sets VirtualService.Local).
//   - A Local LoadBalancer or external IP frontend also carries the
//     cluster-wide endpoints in VirtualService.Internal, whatever
//     internalTrafficPolicy says: traffic to it from a pod or the node
//     itself goes to any endpoint, as kube-proxy short-circuits it
//     (k/k#93456), while outside traffic keeps the local ones and its
//     source address. NodePort frontends do not (a narrower reading of
//     kube-proxy, which short-circuits them too).
//   - Topology hints narrow the cluster-wide set: node hints when every
//     ready endpoint has one and one names this node, else zone hints when
//     every ready endpoint has one and one names this node's zone, else
//     none. trafficDistribution acts through the hints the EndpointSlice
//     controller writes for it, as in kube-proxy.
//   - loadBalancerSourceRanges of the frontend's family restrict
//     LoadBalancer frontends (a /0 range lifts the restriction).
//   - LoadBalancer Services with externalTrafficPolicy Local carry their
//     healthCheckNodePort and the number of distinct ready local endpoint
//     addresses.
//   - A frontend without usable endpoints has no Destinations: the dataplane
//     rejects its traffic instead of black-holing it.
//   - Ingress IPs are proxied whatever the loadBalancerClass (as kube-proxy
//     does), but announced only for a LoadBalancer Service of our class, or
//     of no class unless Options.IgnoreUnclassed; and only those that have
//     a frontend.
//   - The scheduler is the switchyard.dev/scheduler annotation when it names
//     a scheduler the dataplane supports (Options.Schedulers, the
//     dataplane's plugin.SchedulerSet), else Options.Scheduler: an unknown
//     name falls back silently.
//   - Two frontends of one Service with the same address, port and
//     protocol (an external IP that is also an ingress IP) become one: the
//     LoadBalancer frontend, so that its source ranges still apply.
//   - A virtual service key (address, port, protocol) that several
//     Services ask for (the same external or ingress IP and port) belongs
//     to one of them, the lowest ServiceKey: the others list it in
//     ServicePlan.Contested instead of VirtualServices (Arbitrate). When
//     the holder leaves or lets the key go, the next one takes it over,
//     and the Planner reports every Service whose plan that changes. A
//     dataplane thus gets each key from at most one Service.
//
// Every slice in a plan is sorted and free of duplicates, and every
// destination has weight 1 (balancing policies re-weigh later).
package plan
