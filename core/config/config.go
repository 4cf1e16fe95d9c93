package config

import "runtime"

// APIVersion and Kind identify the config file format. APIVersion is the
// current version, the one a Config holds; a file may also be written in
// the older APIVersionV1alpha1, which Parse converts (convert.go).
const (
	APIVersion         = "switchyard.dev/v1alpha2"
	APIVersionV1alpha1 = "switchyard.dev/v1alpha1"
	Kind               = "SwitchyardConfig"
)

// Dataplane modes.
const (
	ModeIPVS   = "ipvs"
	ModeDryRun = "dryrun"
)

// Announcer types.
const (
	AnnouncerARP   = "arp"
	AnnouncerBGP   = "bgp"
	AnnouncerCloud = "cloud"
)

// Config is the daemon's configuration file. The zero value of every
// field means "use the default" documented on it; SetDefaults fills them in.
type Config struct {
	// APIVersion is "switchyard.dev/v1alpha2" in a Config: a v1alpha1
	// file is converted when parsed.
	APIVersion string `yaml:"apiVersion"`
	// Kind must be "SwitchyardConfig".
	Kind string `yaml:"kind"`

	Dataplane  Dataplane   `yaml:"dataplane"`
	Conntrack  Conntrack   `yaml:"conntrack"`
	Policies   Policies    `yaml:"policies"`
	Pools      []Pool      `yaml:"pools"`
	Announcers []Announcer `yaml:"announcers"`
	Membership Membership  `yaml:"membership"`
	Metrics    Metrics     `yaml:"metrics"`
	Health     Health      `yaml:"health"`

	// LoadBalancerClass is the spec.loadBalancerClass Switchyard serves.
	// Default "switchyard.dev/lb".
	LoadBalancerClass string `yaml:"loadBalancerClass"`
	// IgnoreUnclassed, when true, leaves LoadBalancer Services without a
	// loadBalancerClass to someone else. Default false: they are served.
	IgnoreUnclassed bool `yaml:"ignoreUnclassed"`
	// ServiceProxyName is this proxy's name in the Service label
	// service.kubernetes.io/service-proxy-name: a Service carrying the
	// label is left to the proxy it names unless it names this one;
	// Services without the label are served. Default "switchyard". Read
	// at start: a change takes effect at the next restart.
	ServiceProxyName string `yaml:"serviceProxyName"`
}

// Dataplane selects the dataplane and holds the settings every dataplane
// shares (sync periods, masquerading, NodePort addresses, as kube-proxy
// names them); each dataplane's own settings are in its block (ipvs).
type Dataplane struct {
	// Mode is "ipvs" (programs the kernel's IPVS, nftables and sysctls) or
	// "dryrun" (records the desired table, touches no kernel state: for
	// tests and demos on hosts without IPVS). Default "ipvs".
	Mode string `yaml:"mode"`
	// SyncPeriod is the time between two full resyncs (at least half
	// of it from the end of the last, and nine times as long as the last
	// took, so that resyncs take at most a tenth of the loop's time).
	// Default 30s.
	SyncPeriod Duration `yaml:"syncPeriod"`
	// MinSyncPeriod is the average time between two syncs: changes that
	// arrive faster are batched; after a quiet time two syncs may start
	// back to back, as kube-proxy's do. Default 1s.
	MinSyncPeriod Duration `yaml:"minSyncPeriod"`
	// MasqueradeAll masquerades all traffic to service addresses. Default
	// false.
	MasqueradeAll bool `yaml:"masqueradeAll"`
	// ClusterCIDRs are the pod networks: with detectLocal.mode
	// ClusterCIDR, traffic from outside them to a ClusterIP is
	// masqueraded. Default empty.
	ClusterCIDRs []Prefix `yaml:"clusterCIDRs"`
	// DetectLocal tells traffic from this node's pods from other traffic
	// (the node's own, other hosts'), as kube-proxy's
	// --detect-local-mode: the other traffic to a ClusterIP is
	// masqueraded, so that replies come back through this node.
	DetectLocal DetectLocal `yaml:"detectLocal"`
	// NodePortAddresses limits NodePorts to node addresses inside these
	// prefixes, or, as [primary], to the node's primary address of each
	// family (its first InternalIP of the family, else its first
	// ExternalIP), as kube-proxy's nodePortAddresses. Default empty: every
	// node address.
	NodePortAddresses NodePortAddresses `yaml:"nodePortAddresses"`
	// IPVS holds the IPVS dataplane's own settings.
	IPVS IPVS `yaml:"ipvs"`
	// ForwardingMode is how LoadBalancer and external IP traffic reaches
	// its endpoints, for Services without the
	// switchyard.dev/forwarding-mode annotation: "nat" (the node that
	// receives a flow balances it over the endpoints) or "dsr" (every
	// node hashes a flow to the same backend node, tunnels it there, and
	// the backend node replies to the client directly: docs/dsr.md).
	// Default "nat".
	ForwardingMode string `yaml:"forwardingMode"`
	// DSR holds the settings of the dsr forwarding mode, which must be
	// the same on every node.
	DSR DSR `yaml:"dsr"`
}

// Forwarding modes (dataplane.forwardingMode and the
// switchyard.dev/forwarding-mode annotation).
const (
	ForwardingNAT = "nat"
	ForwardingDSR = "dsr"
)

// Encapsulations of the dsr mode (dataplane.dsr.encapsulation).
const (
	EncapIPIP = "ipip"
	EncapGUE  = "gue"
)

// DSR is the dsr forwarding mode's settings (docs/dsr.md). Every node of
// the cluster must have the same values, or their Maglev tables differ
// and flows moved between nodes break.
type DSR struct {
	// Encapsulation is how a flow travels from the node that received
	// it to the node that serves it: "ipip" (20 bytes a packet) or "gue"
	// (Generic UDP Encapsulation, 32 bytes, for networks that carry only
	// TCP and UDP). Default "ipip".
	Encapsulation string `yaml:"encapsulation"`
	// GUEPort is the UDP port GUE uses on every node. Default 6080.
	GUEPort int `yaml:"guePort"`
	// Seed seeds the Maglev tables and the per-packet flow hash; it
	// must be the same non-zero value on every node. Default 0x5eed
	// (24301).
	Seed uint32 `yaml:"seed"`
	// TableSize is the Maglev table size, a prime at least 100 times the
	// nodes: fixed, since a size change moves almost every flow. Default
	// 16381 (up to 163 nodes), as Cilium's maglev.tableSize.
	TableSize uint64 `yaml:"tableSize"`
	// MTU is the MTU of the path between nodes: TCP's MSS is clamped so
	// that the client's segments still fit it once encapsulated.
	// Default 1500.
	MTU int `yaml:"mtu"`
}

// Local traffic detection modes (dataplane.detectLocal.mode), named as
// kube-proxy's --detect-local-mode.
const (
	// LocalModeClusterCIDR: pods are sources inside dataplane.clusterCIDRs.
	LocalModeClusterCIDR = "ClusterCIDR"
	// LocalModeNodeCIDR: pods are sources inside this node's Node
	// spec.podCIDRs, followed as the Node changes.
	LocalModeNodeCIDR = "NodeCIDR"
	// LocalModeBridgeInterface: pods' packets come in on one bridge.
	LocalModeBridgeInterface = "BridgeInterface"
	// LocalModeInterfaceNamePrefix: pods' packets come in on interfaces
	// whose names start with a prefix (veth pairs).
	LocalModeInterfaceNamePrefix = "InterfaceNamePrefix"
)

// DetectLocal is how the dataplane tells traffic from this node's pods
// from other traffic, as kube-proxy's detectLocalMode and detectLocal.
// Without a detector for a family (no CIDR of that family, no podCIDR
// allocated yet) only the node's own traffic sourced from a ClusterIP is
// masqueraded for it.
type DetectLocal struct {
	// Mode is ClusterCIDR, NodeCIDR, BridgeInterface or
	// InterfaceNamePrefix. Default: ClusterCIDR when
	// dataplane.clusterCIDRs is set, NodeCIDR otherwise, so that a fresh
	// install detects pods without listing CIDRs.
	Mode string `yaml:"mode"`
	// BridgeInterface is the bridge pods are attached to (e.g. cni0);
	// required with mode BridgeInterface, refused with another mode.
	BridgeInterface string `yaml:"bridgeInterface"`
	// InterfaceNamePrefix starts the names of pods' interfaces on the
	// node (e.g. veth); required with mode InterfaceNamePrefix, refused
	// with another mode.
	InterfaceNamePrefix string `yaml:"interfaceNamePrefix"`
}

// Conntrack tunes the kernel's connection tracking as kube-proxy's
// conntrack section does, with its defaults. The IPVS dataplane's
// `switchyard --set-sysctls` applies it (ipvs/tuning, in the DaemonSet's
// privileged init container), writing only values that differ; the
// dry-run dataplane touches nothing. A change takes effect at the next
// start.
type Conntrack struct {
	// MaxPerCore sets net/netfilter/nf_conntrack_max to MaxPerCore times
	// the node's CPUs, at least Min, and raises the nf_conntrack module's
	// hashsize to a quarter of it if it is smaller. Default 32768; 0
	// leaves both alone (and Min is unused).
	MaxPerCore *int `yaml:"maxPerCore"`
	// Min is the smallest nf_conntrack_max MaxPerCore sets. Default
	// 131072.
	Min *int `yaml:"min"`
	// TCPEstablishedTimeout sets nf_conntrack_tcp_timeout_established,
	// whole seconds. Default 24h; 0s leaves the kernel's value.
	TCPEstablishedTimeout *Duration `yaml:"tcpEstablishedTimeout"`
	// TCPCloseWaitTimeout sets nf_conntrack_tcp_timeout_close_wait, whole
	// seconds. Default 1h; 0s leaves the kernel's value.
	TCPCloseWaitTimeout *Duration `yaml:"tcpCloseWaitTimeout"`
	// UDPTimeout sets nf_conntrack_udp_timeout, whole seconds. Default
	// 0s: the kernel's value is left alone.
	UDPTimeout Duration `yaml:"udpTimeout"`
	// UDPStreamTimeout sets nf_conntrack_udp_timeout_stream, whole
	// seconds. Default 0s: the kernel's value is left alone.
	UDPStreamTimeout Duration `yaml:"udpStreamTimeout"`
}

// IPVS holds the settings only the IPVS dataplane has, named as
// kube-proxy names them.
type IPVS struct {
	// Scheduler is the default IPVS scheduler: rr, wrr, lc, wlc, lblc,
	// lblcr, dh, sh, sed, nq, fo, ovf, mh or twos (the dataplane's list:
	// a config naming another is refused). Default "rr".
	Scheduler string `yaml:"scheduler"`
	// TCPTimeout, TCPFinTimeout and UDPTimeout set the IPVS connection
	// timeouts (ipvsadm --set) when the dataplane starts, whole seconds.
	// Default 0: the kernel's value is left alone.
	TCPTimeout    Duration `yaml:"tcpTimeout"`
	TCPFinTimeout Duration `yaml:"tcpFinTimeout"`
	UDPTimeout    Duration `yaml:"udpTimeout"`
	// StrictARP sets arp_ignore=1 and arp_announce=2 so that only an
	// announcer answers ARP for service addresses. Default true.
	StrictARP *bool `yaml:"strictARP"`
	// DrainTimeout bounds graceful termination: the real server of an
	// endpoint that went away gets weight 0, keeps its established
	// connections and is deleted when they end, or once it has drained
	// this long. Applied on reload (a real server already draining then
	// goes at the new bound, counted from when it began). Default 15m.
	DrainTimeout Duration `yaml:"drainTimeout"`
}

// Policies configures the balancing policies.
type Policies struct {
	// Default is the policy for Services without a switchyard.dev/policy
	// annotation: a policy ConfigMap's name or "builtin:<name>". Default
	// "": no policy, every endpoint gets the same weight.
	Default string `yaml:"default"`
	// EvaluationDeadline bounds one policy evaluation. Default 50ms. A
	// built-in policy's late result stands (plugin.Builtin): it cannot run
	// away, and late there means a busy node.
	EvaluationDeadline Duration `yaml:"evaluationDeadline"`
	// MemoryLimit caps a policy instance's memory, as a byte count or
	// with a Ki, Mi or Gi suffix. Default 32Mi.
	MemoryLimit ByteSize `yaml:"memoryLimit"`
	// StatisticsInterval is how often live IPVS statistics are read and
	// policies re-evaluated with them. Default 10s.
	StatisticsInterval Duration `yaml:"statisticsInterval"`
	// Workers is how many Services' policies are evaluated at once, 0 to
	// MaxPolicyWorkers. Default 0: one fewer than the CPUs the daemon may
	// use (GOMAXPROCS), at least one; EvaluationWorkers resolves it.
	// Compiled WebAssembly cannot be preempted by the Go scheduler, and a
	// module's deadline is enforced by a goroutine: with a worker on every
	// CPU, runaway modules would hold them all and overrun their deadlines
	// (and stall the daemon) until one returned. Each worker may hold an
	// instance of a WebAssembly policy (a few MiB for a Go guest).
	Workers int `yaml:"workers"`
	// CacheDir is the directory where compiled WebAssembly policies are
	// kept across restarts, so a restarted daemon does not compile them
	// again (about 1s for a Go guest), and, in its last-good
	// subdirectory, the last good version of each policy, so a daemon
	// restarted while a policy's ConfigMap is broken keeps running it
	// (its sha256 is checked when read back; a damaged file is ignored).
	// An empty string disables both; a directory the daemon cannot
	// create or write is logged and the daemon runs without it (so is a
	// cache that fails later: a damaged entry is dropped, a module it
	// cannot store is compiled without it). Default
	// "/var/cache/switchyard/wasm".
	CacheDir *string `yaml:"cacheDir"`
}

// EvaluationWorkers returns the number of policy evaluations run at once:
// Workers, or GOMAXPROCS-1 (at least 1) when Workers is 0.
func (p *Policies) EvaluationWorkers() int {
	if p.Workers > 0 {
		return p.Workers
	}
	return max(1, runtime.GOMAXPROCS(0)-1)
}

// CompilationCacheDir returns the WebAssembly compilation cache's
// directory, "" when the cache is disabled.
func (p *Policies) CompilationCacheDir() string {
	if p.CacheDir == nil {
		return DefaultPolicyCacheDir
	}
	return *p.CacheDir
}

// Pool is a named set of addresses LoadBalancer IPs are allocated from.
type Pool struct {
	// Name is the pool's name (a DNS label), used by the
	// switchyard.dev/address-pool annotation. Required.
	Name string `yaml:"name"`
	// Addresses are CIDRs ("192.0.2.0/28", "2001:db8::/120") or inclusive
	// ranges ("192.0.2.10-192.0.2.20"). At least one is required.
	Addresses []string `yaml:"addresses"`
	// AutoAssign lets Services that ask for no pool and no address get
	// addresses from it. Default true.
	AutoAssign *bool `yaml:"autoAssign"`
	// AvoidBuggyIPs keeps IPv4 addresses ending in .0 or .255 out of the
	// pool. Default false.
	AvoidBuggyIPs bool `yaml:"avoidBuggyIPs"`
	// Namespaces, when non-empty, are the only namespaces it serves.
	Namespaces []string `yaml:"namespaces"`
	// NamespaceSelectors, when non-empty, restrict it to namespaces whose
	// labels match one of them.
	NamespaceSelectors []LabelSelector `yaml:"namespaceSelectors"`
	// ServiceSelectors, when non-empty, restrict it to Services whose
	// labels match one of them.
	ServiceSelectors []LabelSelector `yaml:"serviceSelectors"`
}

// LabelSelector matches labels as a Kubernetes LabelSelector does.
type LabelSelector struct {
	MatchLabels      map[string]string          `yaml:"matchLabels"`
	MatchExpressions []LabelSelectorRequirement `yaml:"matchExpressions"`
}

// LabelSelectorRequirement is one expression of a LabelSelector.
type LabelSelectorRequirement struct {
	Key string `yaml:"key"`
	// Operator is In, NotIn, Exists or DoesNotExist.
	Operator string   `yaml:"operator"`
	Values   []string `yaml:"values"`
}

// Announcer is one named announcer. Exactly the settings block matching
// Type may be set: arp, bgp or cloud for the built-in types, settings for
// a type registered outside this package.
type Announcer struct {
	// Name identifies the announcer (a DNS label). Required.
	Name string `yaml:"name"`
	// Type is "arp", "bgp", "cloud", or the name of another registered
	// announcer type (AnnouncerTypeCheck refuses any other). Required.
	Type string `yaml:"type"`
	// Pools are the pools whose addresses it announces. Default empty:
	// every pool.
	Pools []string `yaml:"pools"`
	// NodeSelector, when non-empty, are labels a node must carry to
	// announce.
	NodeSelector map[string]string `yaml:"nodeSelector"`

	ARP   *ARPAnnouncer   `yaml:"arp"`
	BGP   *BGPAnnouncer   `yaml:"bgp"`
	Cloud *CloudAnnouncer `yaml:"cloud"`
	// Settings is the settings block of a type registered outside this
	// package, read by that type (DecodeSettings). The built-in types
	// refuse it.
	Settings map[string]any `yaml:"settings"`
}

// ARPAnnouncer announces IPv4 addresses with ARP and IPv6 addresses with
// neighbour advertisements.
type ARPAnnouncer struct {
	// Interfaces to answer on. Default empty: every interface that has a
	// route towards the address.
	Interfaces []string `yaml:"interfaces"`
}

// BGPAnnouncer is an embedded BGP speaker.
type BGPAnnouncer struct {
	// ASN is this node's AS number. Required.
	ASN uint32 `yaml:"asn"`
	// RouterID is an IPv4 address. Default: the node's first IPv4 address.
	RouterID string `yaml:"routerID"`
	// ListenPort is the port to accept sessions on. Default 0: no
	// listening socket, sessions are initiated by this node.
	ListenPort int `yaml:"listenPort"`
	// GracefulRestart, when set and enabled, advertises BGP graceful
	// restart (RFC 4724) to every peer, so that a restart of the daemon
	// moves no traffic. Default none: off.
	GracefulRestart *BGPGracefulRestart `yaml:"gracefulRestart"`
	// Peers to announce to. At least one is required.
	Peers []BGPPeer `yaml:"peers"`
}

// BGPGracefulRestart is the graceful restart (RFC 4724) this node's
// speaker advertises. When the daemon stops for a restart (its Node is
// not being deleted, drained or shut down) it ends its sessions without
// a NOTIFICATION, and peers keep its routes, marked stale, for
// RestartTime or until the restarted daemon has sent them again; when
// the node is going away it withdraws them first, as without graceful
// restart. A crash keeps them too.
type BGPGracefulRestart struct {
	// Enabled advertises the capability. Default false.
	Enabled bool `yaml:"enabled"`
	// RestartTime is how long peers keep this node's routes after its
	// sessions end without a NOTIFICATION, in whole seconds from 1s to
	// 4095s. Default 120s.
	RestartTime Duration `yaml:"restartTime"`
}

// BGPPeer is one BGP neighbour.
type BGPPeer struct {
	// Address is the peer's IP address. Required.
	Address string `yaml:"address"`
	// ASN is the peer's AS number. Required.
	ASN uint32 `yaml:"asn"`
	// Port is the peer's port. Default 179.
	Port int `yaml:"port"`
	// HoldTime is the proposed hold time, at least 3s. Default 90s.
	HoldTime Duration `yaml:"holdTime"`
	// KeepaliveTime must be shorter than HoldTime. Default HoldTime/3.
	KeepaliveTime Duration `yaml:"keepaliveTime"`
	// PasswordSecret names a key of a Secret (in the daemon's namespace)
	// holding the TCP MD5 password, watched: a change re-creates the
	// session with the new password; while the Secret or key is missing
	// the peer stays down. Default none.
	PasswordSecret *SecretKeyRef `yaml:"passwordSecret"`
	// PasswordFile is a file holding the TCP MD5 password, such as a
	// Secret mounted into the pod, read at start. Default none.
	PasswordFile string `yaml:"passwordFile"`
	// EBGPMultihop is the TTL for eBGP sessions. Default 0: directly
	// connected.
	EBGPMultihop int `yaml:"ebgpMultihop"`
	// NodeSelector, when non-empty, are labels a node must carry to peer.
	NodeSelector map[string]string `yaml:"nodeSelector"`
	// Communities to attach, as "ASN:value". Default none.
	Communities []string `yaml:"communities"`
	// LocalPreference to attach (iBGP only). Default 0: not sent.
	LocalPreference uint32 `yaml:"localPreference"`
	// BFD, when set, runs a BFD session with the peer (RFC 5880; single
	// hop, or RFC 5883 multihop when ebgpMultihop is set): when it fails
	// the BGP session is torn down at once instead of at the hold time.
	// The peer must run BFD too. Default none.
	BFD *BGPPeerBFD `yaml:"bfd"`
}

// BGPPeerBFD is a peer's BFD session. A failure is detected after
// multiplier intervals without a packet.
type BGPPeerBFD struct {
	// MinRx is the shortest interval between the peer's packets this
	// node accepts, 10ms to 60s. Default 300ms.
	MinRx Duration `yaml:"minRx"`
	// MinTx is the interval this node wants to send at, 10ms to 60s
	// (1s while the session is not up, as RFC 5880 requires). Default
	// 300ms.
	MinTx Duration `yaml:"minTx"`
	// Multiplier is the detect multiplier, 1 to 255. Default 3.
	Multiplier int `yaml:"multiplier"`
}

// SecretKeyRef names a key of a Secret.
type SecretKeyRef struct {
	Name string `yaml:"name"`
	Key  string `yaml:"key"`
}

// CloudAnnouncer asks a cloud load balancer, through an HTTP webhook, to
// send an address's traffic to this node.
type CloudAnnouncer struct {
	// URL of the webhook (http or https). Required.
	URL string `yaml:"url"`
	// Timeout bounds one webhook call. Default 10s.
	Timeout Duration `yaml:"timeout"`
	// TokenFile is a file holding the bearer token sent to the webhook,
	// read for every call so a rotated Secret is picked up. Default none.
	TokenFile string `yaml:"tokenFile"`
}

// Membership configures gossip membership among the daemons.
type Membership struct {
	// BindAddress is the IP address to gossip on. Default "0.0.0.0".
	BindAddress string `yaml:"bindAddress"`
	// Port is the gossip port (TCP and UDP). Default 7946.
	Port int `yaml:"port"`
	// SecretKeySecret names a key of a Secret (in the daemon's
	// namespace) holding the gossip encryption keys: one base64 key per
	// line, each 16, 24 or 32 bytes once decoded (AES-128/192/256-GCM);
	// the first encrypts, all decrypt. A change of the Secret is applied
	// at once, so keys rotate without a restart: add the new key second,
	// then move it first, then remove the old one. The daemon does not
	// start while the Secret or key is missing or invalid. Default none:
	// gossip in clear (authenticated by nothing but the network).
	SecretKeySecret *SecretKeyRef `yaml:"secretKeySecret"`
	// SecretKeyFile is a file with the same content (a mounted Secret),
	// read at start. Default none. At most one of the two may be set.
	SecretKeyFile string `yaml:"secretKeyFile"`
	// QuorumGuard, when true, keeps both sides of a partition from
	// answering for the same layer-2 address: a daemon that has not heard
	// from members that could form a majority without it announces no
	// layer-2 address (its BGP routes stay), a majority moves the
	// addresses of a node it finds dead only after a short fence (2 x
	// max(suspicionMult, nodes) probe intervals: 0.6 s for three nodes
	// with the defaults), and with exactly half alive every daemon waits
	// for Kubernetes readiness instead of gossip. A node dead to gossip
	// and NotReady in Kubernetes no longer counts, so the survivors of a
	// crash of most nodes (and of one of two) take over once Kubernetes
	// marks them NotReady (about 40 s with Kubernetes defaults); false
	// gives sub-second failover there, at the price of partition
	// safety, as MetalLB's layer 2 does. Default true.
	QuorumGuard *bool `yaml:"quorumGuard"`
	// ProbeInterval, ProbeTimeout and SuspicionMult time the failure
	// detector (memberlist's SWIM with Lifeguard; Consul calls them
	// probe_interval, probe_timeout and suspicion_mult). Every
	// ProbeInterval a daemon probes another and waits ProbeTimeout for
	// its ack before asking others to probe it; a node that still does
	// not answer is suspected, and declared dead (its layer-2 addresses
	// move) unless it refutes within SuspicionMult x ProbeInterval (x
	// log10 of the cluster size from 10 nodes on; up to three times
	// that without another daemon confirming). Expected detection is
	// about ProbeTimeout + ProbeInterval x (1 + SuspicionMult): 0.45 s
	// with the defaults (100ms, 50ms, 3). Shorter timings detect faster
	// but declare a starved daemon (CPU throttling, a long GC pause, an
	// overloaded node) dead when it merely answered late, which moves
	// its addresses away and back; a loaded or virtualised cluster
	// wants longer ones (such as 1s, 500ms, 4: about 5.5 s). All
	// daemons should use the same values. Read at start (a change
	// takes effect at the next restart). ProbeTimeout must be shorter
	// than ProbeInterval.
	ProbeInterval Duration `yaml:"probeInterval"`
	ProbeTimeout  Duration `yaml:"probeTimeout"`
	SuspicionMult int      `yaml:"suspicionMult"`
	// RestartGrace is how long the other daemons keep a restarting
	// daemon's layer-2 addresses (and the cloud addresses it owns) on its
	// node, which keeps forwarding,
	// instead of moving them and back with every established flow through
	// them. On SIGTERM a daemon whose Node is neither deleted, cordoned
	// nor shutting down (the shutdown intent the BGP graceful restart
	// uses too) leaves gossip saying it restarts; the others hold it
	// alive for this long or until it is back. A node going away leaves
	// as before, and its addresses move at once; a crashed daemon says
	// nothing and is failed over by the failure detector, whatever this
	// is. Zero: a restarting daemon leaves as any other, and its
	// addresses move away and back. 0 to 10m; default 30s. Read at start.
	RestartGrace *Duration `yaml:"restartGrace"`
}

// Metrics configures the metrics server (/metrics and /debug/state).
type Metrics struct {
	// BindAddress is host:port. Default "127.0.0.1:10249".
	BindAddress string `yaml:"bindAddress"`
}

// Health configures the health server (/healthz, /livez, /readyz).
type Health struct {
	// BindAddress is host:port. Default "0.0.0.0:10256".
	BindAddress string `yaml:"bindAddress"`
}
