// Package cluster is the cluster lab: several Kubernetes nodes, a router
// and a client in one kernel lab guest (test/lab), the real switchyard
// daemon on every node, against a real kube-apiserver on the host.
//
// IPVS, nftables, conntrack, routes and sysctls are per network
// namespace, so each node is a namespace with its own dataplane and its
// own daemon process. The topology, described in one place (Plan) and
// built by code (New):
//
//	client 203.0.113.10 ── router 203.0.113.1 | 10.0.0.1 ── bridge (the nodes' LAN, layer 2)
//	                                                         ├─ node1 10.0.0.11  cbr0 10.244.1.1/24 ─ pods 10.244.1.10, .11 …
//	                                                         ├─ node2 10.0.0.12  cbr0 10.244.2.1/24 ─ pods …
//	                                                         └─ node3 10.0.0.13  cbr0 10.244.3.1/24 ─ pods …
//
// Every link carries IPv6 too (topology6_linux.go): the client
// 2001:db8:113::10 behind the router's 2001:db8:113::1, the LAN
// fd00:10::/64 (the router ::1, node i ::(10+i)), node i's pods
// fd00:244:i::/64 behind its bridge's ::1; the Node objects list both
// InternalIPs, IPv4 first, and both pod CIDRs, as a dual-stack kubelet
// does.
//
// The router runs FRR (zebra and bgpd, Options.FRR): AS 64513 peering
// over the LAN with every node's daemon (AS 64512, its bgp announcer;
// each node over IPv4 for IPv4 routes and over IPv6 for IPv6 ones),
// installing one ECMP route per LoadBalancer IP over the nodes that
// announce it, with layer-4 multipath hashing of each packet's headers
// (fib_multipath_hash_policy 3: addresses, protocol and ports; policy 1
// would follow the client socket's hash, which TCP changes on a
// retransmission timeout), so the client's flows spread over the nodes
// by their ports. The
// daemons' config (DefaultDaemonConfig; LoadBalancerConfig is its
// LoadBalancer block) has two pools, neither assigning automatically: a
// Service names one (ServiceSpec.Pool) and WaitLoadBalancerIP waits for
// its address:
//
//	pool l2  10.0.0.240/28    on the LAN: the arp announcer on eth0; the elected node answers ARP
//	pool bgp 198.51.100.0/28  routed: the bgp announcer on every eligible node, ECMP at the router
//	         2001:db8:100::/124  its IPv6 range, for IPv6 Services (ServiceSpec.IPv6)
//
// More BGP routers can join the LAN beside it (AddLANRouter: a namespace
// of its own at a free LAN address, forwarding nothing for the client)
// running FRR with bfdd (StartFRR) or BIRD 2 (StartBIRD), configured as
// the peer lab's routers are (test/netns/routers Peering): the BGP node
// loss suite peers every daemon with them, with BFD and without, and reads
// each one's FIB (Namespace.NextHops).
//
// RouterNeighbour and RouterNextHops read what the router's kernel holds
// (its ARP entry for an address, its route's next hops); SetLAN cuts a
// node off the LAN, KillDaemon kills its daemon; FirstAnswer measures
// the time to the first accepted answer. For chaos: APIDown and APIUp
// take the API server away from every daemon and give it back,
// SignalDaemon freezes or thaws one, FRR.Restart restarts the router's
// FRR, and Node.Kernel reads what a node's kernel holds of the
// dataplane (IPVS, switchyard0, the nftables ClusterIP sets) to compare
// with PlannedKernel of its daemon's plan (Node.Plan). Suites log
// measurements as "cluster-metric NAME=VALUE" lines, which `make
// bench-cluster` collects.
//
// Pod CIDRs are routed host-gw style: every node has a route to every other
// node's pod CIDR through that node's LAN address; no overlay. The client
// reaches the nodes only through the router. Pods are namespaces behind
// their node's bridge; each serves HTTP, a line-based TCP protocol and UDP
// (Pod* ports) and answers with its own name and the address it saw the
// client as. The harness writes the Node, Service and EndpointSlice
// objects matching the topology (nodeName, zone, ready/serving/terminating)
// to the API server; the daemons program their node's IPVS from them.
//
// LoadBalancer ingress IPs of a ServiceSpec (IngressIP) are written by the
// harness, under StaticLoadBalancerClass, so no daemon allocates or
// announces them; RouteThrough gives the router a fixed path to such an
// address (or an external IP) through one node. A node's daemon can run
// with its own config (SetDaemonConfig, then a restart).
//
// Traffic (StartTraffic) is the tool for the suites and benchmarks: many
// concurrent long-lived TCP or UDP flows from one namespace, each one
// recording the first break (reset, timeout, an answer from another
// backend) with its time, so that a test can say "of N established flows,
// M survived". Get is one request, for "who answers and what did it see";
// Download fetches a large body (the pods' HTTP server adds filler on
// ?bytes=N), for byte counts on the nodes' interfaces.
//
// How it runs: the host-side test (build tag cluster, `make
// test-cluster`) starts etcd and kube-apiserver (test/apitest), applies
// deploy/'s RBAC and ServiceAccount, builds the daemon statically and this
// package's test binary, and boots one guest on qemu user networking with
// both, and lends it Debian's FRR and BIRD (FRRFiles, BIRDFiles, with
// their libraries and the frr user; `make test-cluster` installs the
// packages). Inside, the test binary (every guest test skips outside the
// lab)
// builds the topology, reaches the API server at the host's loopback
// (10.0.2.2), and gives each node namespace a forward of the API server's
// address on its own loopback, so the daemons' kubeconfig names
// https://127.0.0.1:PORT as on the host.
package cluster
