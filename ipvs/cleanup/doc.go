// Package cleanup removes what a service proxy left on a node, so that the
// node can switch between Switchyard and kube-proxy in either direction:
//
//   - Switchyard removes everything Switchyard owns, and nothing else: the
//     IPVS virtual services the dataplane's ownership rule proves its own
//     (ipvs.State.Owns: an address bound to switchyard0 or switchyard-dsr,
//     or a key the table's owned4/owned6 sets record) and the dsr side's
//     peer firewall-mark services (ipvs.IsDSRMark, while the dsr table
//     exists or switchyard-dsr holds addresses), then the GUE (FOU) port
//     the dsr table records, the nftables tables inet switchyard and
//     inet switchyard-dsr, then the dummy links switchyard0 and
//     switchyard-dsr (only if they are dummy links). tunl0, ipip's
//     fallback device, is the ipip module's and stays.
//   - KubeProxy removes kube-proxy's leftovers of its IPVS, iptables and
//     nftables modes, as kube-proxy's own CleanupLeftovers does, but
//     narrower on IPVS: kube-proxy flushes the whole IPVS table, this
//     deletes only the services on addresses bound to kube-ipvs0 and, on
//     the node's other addresses, those in kube-proxy's default NodePort
//     range (30000-32767) that Switchyard does not own. Then the dummy link
//     kube-ipvs0; every KUBE-* chain of the nat, filter and mangle tables
//     (IPv4 and IPv6) except the kubelet's, with the rules of other chains
//     that jump to them; the KUBE-* ipsets (after the chains that use
//     them); and the nftables tables ip kube-proxy and ip6 kube-proxy.
//
// Both are idempotent: what is already gone is no error. The IPVS table,
// links and nftables go through narrow interfaces (Host); iptables and
// ipset have no Go library here, so, as kube-proxy does, they run the
// iptables-save, iptables-restore, ip6tables-save, ip6tables-restore and
// ipset binaries, and the Report says so when one is missing. What to
// remove is planned purely from their output (planIPTables, planIPSets).
// The package does not log: it returns what it removed and what it could
// not check.
package cleanup
