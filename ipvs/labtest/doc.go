// Package labtest builds the network a kernel-lab guest test needs and
// drives real traffic through it. It runs only inside the lab's VM (see
// test/lab), where it may freely create namespaces and links.
//
// The topology: the guest's root namespace is the node. Each backend lives
// in its own network namespace behind a veth pair, serving HTTP on TCP 8080,
// a UDP echo on 5353 and, when the kernel has SCTP, an SCTP server on 9132
// (sctp.go, raw sockets), over IPv4 and IPv6; each answer names the backend.
// A client namespace reaches the node through its own veth pair, and the
// node's root namespace can act as a hostNetwork client. Virtual IPs live on
// the dummy interface switchyard0.
//
// Every client connection binds a unique source port: IPVS reschedules a
// SYN that a backend drops because the reused 4-tuple is still in TIME_WAIT
// there, which breaks exact splits (kernel-lab.md pitfall 1).
//
// The suite in this package (guest-only tests) checks the IPVS behaviour the
// dataplane relies on: exact rr and wrr splits over TCP and UDP, IPv4 and
// IPv6, from a client namespace and from the node itself, with the
// kernel's own counters agreeing; and the facts graceful termination rests
// on: a weight-0 real server keeps its established connections while new
// ones avoid it, whereas a deleted real server's established connections
// are silently dropped (expire_nodest_conn=0).
//
// The Dataplane tests (dataplane_test.go) drive ipvs.Dataplane itself with
// plans: exact rr and wrr splits, mh with mh-port, affinity, a service
// without endpoints refused at once, a restart that changes no kernel
// object and keeps an established connection, graceful removal of a
// backend, a UDP flow moving off a removed backend with its conntrack entry
// deleted, a UDP flow sent before a service had endpoints reaching a
// backend once it has some (its stale entry deleted), IPVS
// connection timeouts set and read back (timeouts_test.go), and masquerade by the nftables table. restart_test.go restarts
// a Dataplane with its nftables table mid-traffic (no IPVS, address or
// nftables change: the ruleset generation stays) and with a plan that
// drops a NodePort (deleted, a foreign service on the node address kept),
// checks hairpin masquerade and that an endpoint change updates the table's
// sets in place; family_test.go covers IPv6 NodePort/LoadBalancer/ClusterIP
// masquerade, SCTP, SCTP with ClientIP affinity over IPv4 and IPv6, and
// IPv6 loadBalancerSourceRanges (allowed, dropped, then allowed once the
// range is added); internal_test.go in-cluster traffic to Local
// LoadBalancer and external IPs (a pod and the node reach every endpoint
// through the firewall-mark service, the node masqueraded; an outside
// client gets the local ones, or is refused without any, and keeps its
// address) and each kind of local traffic detector; open_test.go
// a Dataplane from ipvs.Open, whose own goroutine deletes drained real
// servers once their connections end (SCTP) or the drain timeout passes
// (TCP). They are not parallel:
// their Full applies own every service on switchyard0's addresses.
// policy_test.go runs reconcile.Loop (planner, policy stage, Dataplane)
// with an in-process policy: its weights are what IPVS holds and the
// traffic split follows them, and held connections reach it as live
// statistics that turn its least-connections weights around.
// wasm_policy_test.go does the same with WebAssembly policies in the real
// host (plugins/wasm), compiled in the guest: the Rust SDK's canary and
// leastconn examples, and testdata/hostile.rs, whose never-returning and
// trapping modes leave their Services on uniform weights without touching
// the others. `make test-lab` builds the modules into testdata/ first; a
// missing one fails the test in the guest.
// churn_test.go programs and deletes 200 Services while another
// namespace adds and deletes IPVS services, which makes the kernel's
// listings of this namespace's services (the dump, /proc/net/ip_vs)
// leave some out: a full resync changes nothing and no virtual service is
// left behind.
// BenchmarkLabDataplane (run by hand) compares programming N Services with
// a plain loop creating the same objects.
package labtest
