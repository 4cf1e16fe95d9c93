package kpbench

// SwitchyardConfig is the daemon's configuration in the benchmark: the
// IPVS dataplane with kube-proxy's defaults (rr, a sync at most once a
// second, a full resync every 30 s) and the workload's cluster CIDR, as
// kube-proxy gets it with --cluster-cidr.
const SwitchyardConfig = `apiVersion: switchyard.dev/v1alpha2
kind: SwitchyardConfig
dataplane:
  mode: ipvs
  clusterCIDRs: [` + ClusterCIDR + `]
  minSyncPeriod: 1s
  syncPeriod: 30s
  ipvs:
    scheduler: rr
metrics:
  bindAddress: 127.0.0.1:10249
health:
  bindAddress: 127.0.0.1:10256
`

// KubeProxyModules are the kernel modules kube-proxy needs on top of the
// lab's defaults: for IPVS mode, ipset types and the xtables matches and
// targets its iptables-nft rules use (through nft_compat); for nftables
// mode, the expressions its table uses beyond the defaults' (numgen for
// the endpoint choice, fib for local addresses, reject, limit).
var KubeProxyModules = []string{
	"nft_compat", "ip_set", "ip_set_hash_ip", "ip_set_hash_ipport", "ip_set_hash_ipportip",
	"ip_set_hash_ipportnet", "ip_set_hash_net", "ip_set_bitmap_port",
	"xt_set", "xt_comment", "xt_mark", "xt_MASQUERADE", "xt_addrtype", "xt_conntrack",
	"xt_nat", "xt_tcpudp", "xt_multiport", "ipt_REJECT", "ip6t_REJECT",
	"nft_numgen", "nft_fib_ipv4", "nft_reject_ipv4", "nft_limit",
}

// GuestTools are the host's Debian netfilter tools kube-proxy runs, copied
// into the guest with their libraries (lab.Job.Extra). iptables is the
// nft backend through Debian's alternatives; its extensions are loaded at
// run time, so their directory comes whole. ipset resolves "tcp" through
// /etc/protocols: without it every ipset add fails and kube-proxy retries
// each entry on every sync (seen: 40 s syncs at 200 Services). nft is what
// kube-proxy's nftables mode runs (knftables pipes each transaction to
// `nft -f -`), and what the guest reads its table back with.
//
// ip6tables is left out on purpose: kube-proxy then runs single-stack
// IPv4, like switchyard on this IPv4-only workload. With it, kube-proxy
// also runs an IPv6 proxier whose syncs (iptables, ipsets, no services)
// share the guest's one CPU: seen adding 19 s of sync time per minute at
// 200 Services. nftables mode needs no ip6tables for that, so the guest
// turns the kernel's IPv6 off while it runs (kpguest).
var GuestTools = []string{
	"/usr/sbin/iptables", "/usr/sbin/iptables-save", "/usr/sbin/iptables-restore",
	"/usr/sbin/ipset", "/usr/lib/x86_64-linux-gnu/xtables", "/etc/protocols", "/usr/sbin/nft",
}
