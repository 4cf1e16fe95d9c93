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

// KubeProxyModules are the kernel modules kube-proxy's IPVS mode needs on
// top of the lab's defaults: ipset types and the xtables matches and
// targets its iptables-nft rules use (through nft_compat).
var KubeProxyModules = []string{
	"nft_compat", "ip_set", "ip_set_hash_ip", "ip_set_hash_ipport", "ip_set_hash_ipportip",
	"ip_set_hash_ipportnet", "ip_set_hash_net", "ip_set_bitmap_port",
	"xt_set", "xt_comment", "xt_mark", "xt_MASQUERADE", "xt_addrtype", "xt_conntrack",
	"xt_nat", "xt_tcpudp", "xt_multiport", "ipt_REJECT", "ip6t_REJECT",
}

// GuestTools are the host's Debian netfilter tools kube-proxy runs, copied
// into the guest with their libraries (lab.Job.Extra). iptables is the
// nft backend through Debian's alternatives; its extensions are loaded at
// run time, so their directory comes whole. ipset resolves "tcp" through
// /etc/protocols: without it every ipset add fails and kube-proxy retries
// each entry on every sync (seen: 40 s syncs at 200 Services).
//
// ip6tables is left out on purpose: kube-proxy then runs single-stack
// IPv4, like switchyard on this IPv4-only workload. With it, kube-proxy
// also runs an IPv6 proxier whose syncs (iptables, ipsets, no services)
// share the guest's one CPU: seen adding 19 s of sync time per minute at
// 200 Services.
var GuestTools = []string{
	"/usr/sbin/iptables", "/usr/sbin/iptables-save", "/usr/sbin/iptables-restore",
	"/usr/sbin/ipset", "/usr/lib/x86_64-linux-gnu/xtables", "/etc/protocols",
}
