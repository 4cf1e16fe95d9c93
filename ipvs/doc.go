// Package ipvs is the IPVS dataplane: Dataplane implements plugin.Dataplane
// over the narrow interfaces it declares in front of the kernel:
//
//   - Kernel, the IPVS table (virtual services, real servers), over
//     cloudflare/ipvs: Netlink. A Kernel that is also a Batcher takes
//     several changes per round trip: Netlink's batch sender (batch_linux.go)
//     writes up to 256 requests in one sendmsg(2) on a generic netlink socket
//     of its own, only the last asking for an acknowledgement, so that the
//     kernel answers the failed ones and the last, each error mapped to
//     its command by sequence number (a lost answer makes every command
//     without one an error, never a silent success). The Dataplane sends
//     an Apply's ops a stage at a time (binds, services, real servers,
//     deletions, unbinds: run.go);
//   - Addresses, the dummy link switchyard0 that holds the virtual IPs, over
//     vishvananda/netlink: NetlinkAddresses, an AddressBatcher too (binds
//     and unbinds in batches over route netlink, with the same sender);
//   - Sysctls, the kernel parameters it sets: ProcSysctls;
//   - Conntrack, stale UDP entry deletion over ctnetlink (a removed
//     backend's, a deleted service's, and a service's when it gets its
//     first serving real servers), all of an Apply's or a Drain's in one
//     pass over the table: NetlinkConntrack;
//   - Firewall, its own nftables table (masquerade incl. hairpin,
//     loadBalancerSourceRanges, internal marks) over google/nftables:
//     NFTables. The table
//     also records a content stamp, so that an unchanged table is never
//     rewritten (not even by a restart), and the owned virtual services on
//     shared node addresses, recorded before they are created, so that
//     ownership of NodePorts survives a restart and a crash. The Dataplane
//     keeps the table's spec as reference counts (fwindex.go) as services
//     are wanted and unwanted, with a stamp that sums its elements' hashes,
//     so that a changed Service reaches the table as an update of its own
//     elements (Firewall.Update), whatever the size of the cluster; a full
//     resync reads the element sets back and rewrites a table whose
//     elements someone changed.
//
// # In-cluster traffic to Local frontends
//
// A Local LoadBalancer or external IP frontend serves the outside from its
// local endpoints, keeping the client's address, and in-cluster clients
// (a pod, the node itself) from every endpoint (the plan's Internal set,
// as kube-proxy does, k/k#93456). IPVS looks a packet's firewall mark up
// before its address, port and protocol (ip_vs_service_find), so each
// such frontend gets a second, firewall-mark virtual service holding the
// Internal set, keyed by MarkKey (fwmark.go), and the nftables table marks
// the frontend's in-cluster packets with that mark before IPVS sees them:
// in the output hook (the node's own) and in prerouting from a cluster
// CIDR (pods; without cluster CIDRs pods cannot be told from the outside
// and get the local endpoints, as with kube-proxy without a local
// detector). The node's marked traffic is masqueraded (fib saddr type
// local: its source may be the frontend's address, which the endpoint's
// node holds too); a pod's is not. Marks are 1..InternalMarkMask (below
// the masquerade bit), handed out per frontend and kept while it has an
// Internal set; the table records them (map internal4/6), so a restarted
// Dataplane keeps them, and a freed mark is reused only after every other,
// so that a packet still marked for an old frontend never reaches a new
// one's service. The mark services live on no address: the table's owned
// sets prove them, like NodePorts. Policies weigh Destinations only; the
// Internal set keeps weight 1.
//
// Planning is pure: Diff turns the desired state and the kernel's state
// into ordered operations, deleting only what State.Owns (services on
// addresses bound to switchyard0, or created or adopted by this
// Dataplane or a previous one, as the firewall table records).
// Dataplane applies them, keeps a cache of the kernel re-read
// on Full updates and after errors (the real servers of every virtual
// service in one pass of /proc/net/ip_vs when the Kernel is a
// TableReader, as Netlink is), adopts existing state on restart
// without flushing, and drains removed real servers (weight 0, deleted
// once their connections end or Config.DrainTimeout passes; the daemon
// sets it from dataplane.ipvs.drainTimeout and changes it on reload with
// SetDrainTimeout). Open wires it to the
// running host. Dataplane.Stats (plugin.StatsReader) reads the live
// counters of the real servers it programs, one destination dump per
// virtual service, for the policy stage's statistics tick.
// schedulers.go owns the IPVS scheduler names (Schedulers, the kernel's
// ip_vs_*.c list): Dataplane is the plugin.SchedulerSet that lets the
// planner and the policy stage accept them, and moves rr, which ignores
// weights, to wrr when a policy's weights differ (WeightedScheduler);
// SchedulerSet answers the same before a Dataplane is opened, so that the
// daemon refuses a config whose default scheduler the kernel lacks.
//
// # Crash consistency
//
// The daemon may die between any two kernel calls, and the next one must
// still know what it owns: it deletes only what it owns, so an object it
// cannot prove its own is leaked (kept, never updated or deleted, unless a
// plan wants that very key, which adopts it). Ownership is proved by
// durable kernel state only, and the proof always covers the object:
//
//   - an address on switchyard0 proves the services on it. Diff binds an
//     address before it adds a service on it, and deletes the services
//     before it unbinds the address. A service whose address failed to
//     bind is not created, and an address stays bound while a service on
//     it failed to delete (both are retried by the next Apply).
//   - the nftables table's owned4/owned6 sets prove the services on other
//     addresses (NodePorts on node addresses). They are a journal: before
//     any op of an Apply runs, the services it will create or take over,
//     and those left on an address it unbinds, are added to them (one
//     element-only transaction, and only when such a service is new to
//     the journal; without a table, the first write of the whole table
//     carries them). A service whose record failed is not touched. After
//     the ops, the keys of deleted services are removed, in the same
//     transaction as the table's update when there is one.
//
// So a crash after a creation leaves a recorded service, which the
// restarted daemon adopts if it is still wanted and deletes otherwise; a
// crash after a record and before its creation, or after a deletion and
// before its unrecording, leaves a record of nothing, which the next Apply
// drops without an error (as it drops the record of a service whose
// creation failed). A wanted service that another program created and the
// Apply leaves as it is gets recorded only at the end: a crash before
// leaves it as it was found. The stamp does not cover the journal
// (since stamp version v4; an older table is rewritten once), so none of this
// rewrites the table, and a restart with nothing changed writes nothing.
//
// # Interrupted dumps
//
// A kernel dump that a concurrent change interrupted (NLM_F_DUMP_INTR)
// returns partial results; the interfaces' reads wrap ErrInterrupted then,
// and the dataplane reads again, a bounded number of times (retryDump),
// before it acts on anything. vishvananda/netlink reports the flag
// (addresses: the kernel dumps every address of the namespace, so any
// pod's veth can interrupt it; conntrack). cloudflare/ipvs cannot: neither
// it nor mdlayher/netlink looks at the flag, and the kernel's IPVS dumps
// never set it. Neither the dump of the services nor /proc/net/ip_vs is
// exact when other network namespaces use IPVS (one table for all
// namespaces, Linux 6.1): the dump resumes each part at an index that
// counts every namespace's services, so services another namespace
// deletes meanwhile make it skip some of this one's, silently; the proc
// file advances its position over every namespace's services but restarts
// each read(2) counting only its own, so it skips some whenever other
// namespaces hold services (the cluster lab: several nodes' namespaces in
// one kernel; in production any IPVS user in another namespace). A
// service skipped was unknown to the cache, so it failed its re-creation
// with ErrExists and, once unwanted, stayed while its address left the
// dummy link (leaked as foreign). The load therefore looks up on its own
// (Kernel.Service, an exact get) every service the dataplane had or
// recorded that the dump lacks (Dataplane.leftOut), and a wanted service it
// never had whose add fails with ErrExists is read then, with one get, and
// diffed again as had: a first start asks for none; a real server list
// the proc file skipped is dumped on its own, as for a mark service.
// google/nftables ignores
// it too; a commit to another table, which sets it, leaves the dataplane's
// own table, the only one it reads, as it was.
//
// Package ipvs/cleanup removes what this package owns, by the same
// ownership rule (switchyard --cleanup), and kube-proxy's leftovers.
//
// Everything goes through these interfaces, so it is tested against the
// goroutine-safe fakes in ipvstest on any host; contract tests run the same
// scenarios against the fakes and, in the kernel lab (make test-lab),
// against the real kernel, so the fakes cannot drift from it; ipvs/labtest
// drives real traffic through a Dataplane there. All virtual services use
// NAT (masquerade) forwarding and a full netmask, but the dsr side's
// (dsr.go, DSR): firewall-mark services with one tunnel real server each,
// beside the Dataplane, owning only those marks, its own dummy link and
// its own nftables table (docs/dsr.md); ipvs/dsrlab proves it in the lab.
package ipvs
