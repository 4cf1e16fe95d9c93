// Package ipvs is the IPVS dataplane: Dataplane implements plugin.Dataplane
// over the narrow interfaces it declares in front of the kernel:
//
//   - Kernel, the IPVS table (virtual services, real servers), over
//     cloudflare/ipvs: Netlink;
//   - Addresses, the dummy link switchyard0 that holds the virtual IPs, over
//     vishvananda/netlink: NetlinkAddresses;
//   - Sysctls, the kernel parameters it sets: ProcSysctls;
//   - Conntrack, stale UDP entry deletion over ctnetlink: NetlinkConntrack;
//   - Firewall, its own nftables table (masquerade incl. hairpin,
//     loadBalancerSourceRanges) over google/nftables: NFTables. The table
//     also records a content stamp, so that an unchanged table is never
//     rewritten (not even by a restart), and the owned virtual services on
//     shared node addresses, so that ownership of NodePorts survives a
//     restart.
//
// Planning is pure: Diff turns the desired state and the kernel's state
// into ordered operations, deleting only what State.Owns (services on
// addresses bound to switchyard0, or created or adopted by this
// Dataplane or a previous one, as the firewall table records). Dataplane applies them, keeps a cache of the kernel re-read
// on Full updates and after errors, adopts existing state on restart
// without flushing, and drains removed real servers (weight 0, deleted
// once their connections end or a timeout passes). Open wires it to the
// running host. Dataplane.Stats (plugin.StatsReader) reads the live
// counters of the real servers it programs, one destination dump per
// virtual service, for the policy stage's statistics tick.
//
// Everything goes through these interfaces, so it is tested against the
// goroutine-safe fakes in ipvstest on any host; contract tests run the same
// scenarios against the fakes and, in the kernel lab (make test-lab),
// against the real kernel, so the fakes cannot drift from it; ipvs/labtest
// drives real traffic through a Dataplane there. All virtual services use
// NAT (masquerade) forwarding and a full netmask.
package ipvs
