package config

import (
	"errors"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plan"
)

const (
	header         = "apiVersion: switchyard.dev/v1alpha2\nkind: SwitchyardConfig\n"
	headerV1alpha1 = "apiVersion: switchyard.dev/v1alpha1\nkind: SwitchyardConfig\n"
)

var cmpOpts = cmp.Options{
	cmpopts.EquateEmpty(),
	cmp.Comparer(func(a, b Prefix) bool { return a == b }),
	cmp.Comparer(func(a, b netip.Prefix) bool { return a == b }),
}

func ptr[T any](v T) *T { return &v }

func mustPrefix(s string) Prefix { return Prefix(netip.MustParsePrefix(s)) }

// defaults is the documented default config, written out so that a
// changed default fails here.
func defaults() *Config {
	return &Config{
		APIVersion: APIVersion,
		Kind:       Kind,
		Dataplane: Dataplane{
			Mode:          "ipvs",
			SyncPeriod:    Duration(30 * time.Second),
			MinSyncPeriod: Duration(time.Second),
			DetectLocal:   DetectLocal{Mode: LocalModeNodeCIDR},
			IPVS: IPVS{
				Scheduler:    "rr",
				StrictARP:    ptr(true),
				DrainTimeout: Duration(15 * time.Minute),
			},
			ForwardingMode: "nat",
			DSR:            DSR{Encapsulation: "ipip", GUEPort: 6080, Seed: 0x5eed, TableSize: 16381, MTU: 1500},
		},
		Conntrack: Conntrack{
			MaxPerCore:            ptr(32768),
			Min:                   ptr(131072),
			TCPEstablishedTimeout: ptr(Duration(24 * time.Hour)),
			TCPCloseWaitTimeout:   ptr(Duration(time.Hour)),
		},
		Policies: Policies{
			EvaluationDeadline: Duration(50 * time.Millisecond),
			MemoryLimit:        32 << 20,
			StatisticsInterval: Duration(10 * time.Second),
			CacheDir:           ptr("/var/cache/switchyard/wasm"),
		},
		Membership: Membership{
			BindAddress: "0.0.0.0", Port: 7946, QuorumGuard: ptr(true),
			ProbeInterval: Duration(100 * time.Millisecond), ProbeTimeout: Duration(50 * time.Millisecond), SuspicionMult: 3,
			RestartGrace: ptr(Duration(30 * time.Second)),
		},
		Metrics:           Metrics{BindAddress: "127.0.0.1:10249"},
		Health:            Health{BindAddress: "0.0.0.0:10256"},
		LoadBalancerClass: "switchyard.dev/lb",
		ServiceProxyName:  "switchyard",
	}
}

func TestParse(t *testing.T) {
	full, err := os.ReadFile("testdata/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		in   string
		want *Config
	}{
		{name: "header only", in: header, want: defaults()},
		{name: "empty sections", in: header + "dataplane: {}\npolicies:\npools: []\n", want: defaults()},
		{
			name: "defaults inside list items",
			in: header + `pools: [{name: a, addresses: [192.0.2.1-192.0.2.1]}]
announcers:
- {name: b, type: bgp, bgp: {asn: 1, peers: [{address: "::1", asn: 2, holdTime: 30s}]}}
- {name: c, type: cloud, cloud: {url: "http://127.0.0.1:1/"}}
`,
			want: func() *Config {
				c := defaults()
				c.Pools = []Pool{{Name: "a", Addresses: []string{"192.0.2.1-192.0.2.1"}, AutoAssign: ptr(true)}}
				c.Announcers = []Announcer{
					{Name: "b", Type: "bgp", BGP: &BGPAnnouncer{ASN: 1, Peers: []BGPPeer{{
						Address: "::1", ASN: 2, Port: 179,
						HoldTime: Duration(30 * time.Second), KeepaliveTime: Duration(10 * time.Second),
					}}}},
					{Name: "c", Type: "cloud", Cloud: &CloudAnnouncer{URL: "http://127.0.0.1:1/", Timeout: Duration(10 * time.Second)}},
				}
				return c
			}(),
		},
		{
			name: "detectLocal defaults to ClusterCIDR with clusterCIDRs",
			in:   header + "dataplane:\n  clusterCIDRs: [10.244.0.0/16]\n",
			want: func() *Config {
				c := defaults()
				c.Dataplane.ClusterCIDRs = []Prefix{mustPrefix("10.244.0.0/16")}
				c.Dataplane.DetectLocal.Mode = LocalModeClusterCIDR
				return c
			}(),
		},
		{
			name: "detectLocal by interface name prefix",
			in:   header + "dataplane:\n  detectLocal: {mode: InterfaceNamePrefix, interfaceNamePrefix: veth}\n",
			want: func() *Config {
				c := defaults()
				c.Dataplane.DetectLocal = DetectLocal{Mode: LocalModeInterfaceNamePrefix, InterfaceNamePrefix: "veth"}
				return c
			}(),
		},
		{
			name: "bfd defaults",
			in: header + `announcers:
- {name: b, type: bgp, bgp: {asn: 1, peers: [{address: 10.0.0.1, asn: 2, bfd: {}}, {address: 10.0.0.2, asn: 2, bfd: {minTx: 50ms}}]}}
`,
			want: func() *Config {
				c := defaults()
				peer := func(addr string, b *BGPPeerBFD) BGPPeer {
					return BGPPeer{Address: addr, ASN: 2, Port: 179, HoldTime: Duration(90 * time.Second), KeepaliveTime: Duration(30 * time.Second), BFD: b}
				}
				ms := func(n int) Duration { return Duration(time.Duration(n) * time.Millisecond) }
				c.Announcers = []Announcer{{Name: "b", Type: "bgp", BGP: &BGPAnnouncer{ASN: 1, Peers: []BGPPeer{
					peer("10.0.0.1", &BGPPeerBFD{MinRx: ms(300), MinTx: ms(300), Multiplier: 3}),
					peer("10.0.0.2", &BGPPeerBFD{MinRx: ms(300), MinTx: ms(50), Multiplier: 3}),
				}}}}
				return c
			}(),
		},
		{
			name: "graceful restart defaults",
			in: header + `announcers:
- {name: b, type: bgp, bgp: {asn: 1, gracefulRestart: {enabled: true}, peers: [{address: 10.0.0.1, asn: 2}]}}
- {name: c, type: bgp, bgp: {asn: 1, gracefulRestart: {}, peers: [{address: 10.0.0.1, asn: 2}]}}
`,
			want: func() *Config {
				c := defaults()
				peers := []BGPPeer{{Address: "10.0.0.1", ASN: 2, Port: 179, HoldTime: Duration(90 * time.Second), KeepaliveTime: Duration(30 * time.Second)}}
				c.Announcers = []Announcer{
					{Name: "b", Type: "bgp", BGP: &BGPAnnouncer{ASN: 1, Peers: peers,
						GracefulRestart: &BGPGracefulRestart{Enabled: true, RestartTime: Duration(120 * time.Second)}}},
					{Name: "c", Type: "bgp", BGP: &BGPAnnouncer{ASN: 1, Peers: peers,
						GracefulRestart: &BGPGracefulRestart{RestartTime: Duration(120 * time.Second)}}},
				}
				return c
			}(),
		},
		{
			name: "every field",
			in:   string(full),
			want: &Config{
				APIVersion: APIVersion,
				Kind:       Kind,
				Dataplane: Dataplane{
					Mode:              "ipvs",
					SyncPeriod:        Duration(time.Minute),
					MinSyncPeriod:     Duration(2 * time.Second),
					MasqueradeAll:     true,
					ClusterCIDRs:      []Prefix{mustPrefix("10.244.0.0/16"), mustPrefix("fd00:10:244::/56")},
					DetectLocal:       DetectLocal{Mode: LocalModeClusterCIDR},
					NodePortAddresses: NodePortAddresses{{Prefix: mustPrefix("192.168.0.0/24").Std()}},
					IPVS: IPVS{
						Scheduler:     "mh",
						TCPTimeout:    Duration(15 * time.Minute),
						TCPFinTimeout: Duration(30 * time.Second),
						UDPTimeout:    Duration(5 * time.Minute),
						StrictARP:     ptr(false),
						DrainTimeout:  Duration(5 * time.Minute),
					},
					ForwardingMode: "dsr",
					DSR:            DSR{Encapsulation: "gue", GUEPort: 5555, Seed: 42, TableSize: 65537, MTU: 9000},
				},
				Conntrack: Conntrack{
					MaxPerCore:            ptr(0),
					Min:                   ptr(262144),
					TCPEstablishedTimeout: ptr(Duration(2 * time.Hour)),
					TCPCloseWaitTimeout:   ptr(Duration(0)),
					UDPTimeout:            Duration(30 * time.Second),
					UDPStreamTimeout:      Duration(2 * time.Minute),
				},
				Policies: Policies{
					Default:            "builtin:local-first",
					EvaluationDeadline: Duration(20 * time.Millisecond),
					MemoryLimit:        64 << 20,
					StatisticsInterval: Duration(5 * time.Second),
					Workers:            8,
					CacheDir:           ptr("/var/lib/switchyard/wasm"),
				},
				Pools: []Pool{{
					Name:               "public",
					Addresses:          []string{"192.0.2.0/28", "198.51.100.10-198.51.100.20", "2001:db8::/120"},
					AutoAssign:         ptr(false),
					AvoidBuggyIPs:      true,
					Namespaces:         []string{"web"},
					NamespaceSelectors: []LabelSelector{{MatchLabels: map[string]string{"team": "a"}}},
					ServiceSelectors: []LabelSelector{{MatchExpressions: []LabelSelectorRequirement{
						{Key: "tier", Operator: "In", Values: []string{"edge"}},
					}}},
				}},
				Announcers: []Announcer{
					{
						Name: "l2", Type: "arp", Pools: []string{"public"},
						NodeSelector: map[string]string{"kubernetes.io/os": "linux"},
						ARP:          &ARPAnnouncer{Interfaces: []string{"eth0"}},
					},
					{
						Name: "tor", Type: "bgp",
						BGP: &BGPAnnouncer{ASN: 64512, RouterID: "10.0.0.1", ListenPort: 1790,
							GracefulRestart: &BGPGracefulRestart{Enabled: true, RestartTime: Duration(30 * time.Second)},
							Peers: []BGPPeer{{
								Address: "10.0.0.254", ASN: 64513, Port: 1179,
								HoldTime: Duration(9 * time.Second), KeepaliveTime: Duration(3 * time.Second),
								PasswordSecret: &SecretKeyRef{Name: "bgp-auth", Key: "password"},
								EBGPMultihop:   2, NodeSelector: map[string]string{"rack": "a"},
								Communities: []string{"64512:100"}, LocalPreference: 200,
								BFD: &BGPPeerBFD{MinRx: Duration(200 * time.Millisecond), MinTx: Duration(100 * time.Millisecond), Multiplier: 5},
							}}},
					},
					{
						Name: "cloud", Type: "cloud",
						Cloud: &CloudAnnouncer{URL: "https://lb.example.internal/v1", Timeout: Duration(3 * time.Second)},
					},
				},
				Membership: Membership{
					BindAddress: "10.0.0.1", Port: 7947, QuorumGuard: ptr(false),
					ProbeInterval: Duration(time.Second), ProbeTimeout: Duration(500 * time.Millisecond), SuspicionMult: 4,
					RestartGrace: ptr(Duration(0)),
				},
				Metrics:           Metrics{BindAddress: "0.0.0.0:9249"},
				Health:            Health{BindAddress: "[::]:9256"},
				LoadBalancerClass: "example.com/lb",
				IgnoreUnclassed:   true,
				ServiceProxyName:  "edge-proxy",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.in))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tt.want, got, cmpOpts); diff != "" {
				t.Errorf("Parse mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDefault(t *testing.T) {
	if diff := cmp.Diff(defaults(), Default(), cmpOpts); diff != "" {
		t.Errorf("Default mismatch (-want +got):\n%s", diff)
	}
	if err := Default().Validate(); err != nil {
		t.Errorf("Default().Validate() = %v", err)
	}
}

// TestParseErrors covers documents that fail to decode: each stops at its
// first problem, which names the field and its line.
func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"unknown top-level field", header + "bogus: 1\n", `line 3: bogus: unknown field "bogus"`},
		{"unknown nested field", header + "dataplane:\n  ipvs:\n    schedular: rr\n", `line 5: dataplane.ipvs.schedular: unknown field "schedular"`},
		{"unknown field in a list item", header + "pools:\n- name: a\n  addresses: [192.0.2.0/24]\n  autoassign: true\n", `line 6: pools[0].autoassign: unknown field "autoassign"`},
		{"unknown field in a peer", header + "announcers:\n- name: b\n  type: bgp\n  bgp:\n    asn: 1\n    peers:\n    - address: 10.0.0.1\n      asn: 2\n      password: x\n", `line 11: announcers[0].bgp.peers[0].password: unknown field "password"`},
		{"wrong type", header + "membership:\n  port: abc\n", "line 4: membership.port: want an integer, got a string"},
		{"wrong type bool", header + "ignoreUnclassed: maybe\n", "line 3: ignoreUnclassed: want a boolean, got a string"},
		{"section not a mapping", header + "dataplane: ipvs\n", "line 3: dataplane: want a mapping, got a string"},
		{"duplicate key", header + "metrics: {}\nmetrics: {}\n", `line 4: mapping key "metrics" already defined at [3:1]`},
		{"syntax error", header + "pools: [\n", "line 3: sequence end token ']' not found"},
		{"two documents", header + "---\n" + header, "line 4: want one YAML document, found 2"},
		// Found by FuzzParse: an empty document's GetToken dereferenced
		// its missing body, so a trailing "---" crashed Parse.
		{"trailing empty document", header + "---\n", "line 3: want one YAML document, found 2"},
		{"not a mapping", "- a\n", "line 1: want a mapping with apiVersion and kind"},
		{"empty", "", `apiVersion: missing (want "switchyard.dev/v1alpha2" or the older "switchyard.dev/v1alpha1"); kind: missing (want "SwitchyardConfig")`},
		{"wrong apiVersion", "apiVersion: switchyard.dev/v1\nkind: SwitchyardConfig\n", `line 1: apiVersion: got "switchyard.dev/v1", want "switchyard.dev/v1alpha2" or the older "switchyard.dev/v1alpha1"`},
		{"wrong kind", "apiVersion: switchyard.dev/v1alpha2\nkind: ConfigMap\ndata: {}\n", `line 2: kind: got "ConfigMap", want "SwitchyardConfig"`},
		{"wrong kind in v1alpha1", "apiVersion: switchyard.dev/v1alpha1\nkind: ConfigMap\ndata: {}\n", `line 2: kind: got "ConfigMap", want "SwitchyardConfig"`},

		// v1alpha1 is as strict as v1alpha2.
		{"v1alpha1: unknown top-level field", headerV1alpha1 + "bogus: 1\n", `line 3: bogus: unknown field "bogus"`},
		{"v1alpha1: unknown nested field", headerV1alpha1 + "dataplane:\n  ipvs:\n    schedular: rr\n", `line 5: dataplane.ipvs.schedular: unknown field "schedular"`},
		{"v1alpha1: unknown field in a list item", headerV1alpha1 + "pools:\n- name: a\n  addresses: [192.0.2.0/24]\n  autoassign: true\n", `line 6: pools[0].autoassign: unknown field "autoassign"`},
		{"v1alpha1: wrong type", headerV1alpha1 + "dataplane:\n  ipvs:\n    masqueradeAll: sometimes\n", "line 5: dataplane.ipvs.masqueradeAll: want a boolean, got a string"},
		{"v1alpha1: section not a mapping", headerV1alpha1 + "dataplane: ipvs\n", "line 3: dataplane: want a mapping, got a string"},

		// One version's layout under the other's apiVersion.
		{
			"v1alpha1 layout in v1alpha2", header + "dataplane:\n  mode: ipvs\n  ipvs:\n    scheduler: wlc\n    syncPeriod: 10s\n",
			`line 7: dataplane.ipvs.syncPeriod: unknown field "syncPeriod" (switchyard.dev/v1alpha2 has it at dataplane.syncPeriod: dataplane.ipvs holds only the IPVS dataplane's own settings)`,
		},
		{
			"v1alpha1 layout in v1alpha2, a list", header + "dataplane:\n  ipvs:\n    clusterCIDRs: [10.244.0.0/16]\n",
			`line 5: dataplane.ipvs.clusterCIDRs: unknown field "clusterCIDRs" (switchyard.dev/v1alpha2 has it at dataplane.clusterCIDRs: dataplane.ipvs holds only the IPVS dataplane's own settings)`,
		},
		{
			"v1alpha2 layout in v1alpha1", headerV1alpha1 + "dataplane:\n  mode: ipvs\n  masqueradeAll: true\n",
			`line 5: dataplane.masqueradeAll: unknown field "masqueradeAll" (switchyard.dev/v1alpha1 has it at dataplane.ipvs.masqueradeAll; it is here in apiVersion switchyard.dev/v1alpha2)`,
		},
		{
			"v1alpha2 field in v1alpha1", headerV1alpha1 + "dataplane:\n  detectLocal: {mode: NodeCIDR}\n",
			`line 4: dataplane.detectLocal: unknown field "detectLocal" (switchyard.dev/v1alpha1 has no detectLocal: it was added in apiVersion switchyard.dev/v1alpha2)`,
		},
		{
			"v1alpha2 layout in v1alpha1, before IPVS settings", headerV1alpha1 + "dataplane:\n  nodePortAddresses: []\n  ipvs: {scheduler: rr}\n",
			`line 4: dataplane.nodePortAddresses: unknown field "nodePortAddresses" (switchyard.dev/v1alpha1 has it at dataplane.ipvs.nodePortAddresses; it is here in apiVersion switchyard.dev/v1alpha2)`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.in))
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", c)
			}
			if diff := cmp.Diff(tt.want, err.Error()); diff != "" {
				t.Errorf("error mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestValidate covers documents that decode but hold bad values: every
// problem is reported, with its path and line.
func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []FieldError
	}{
		{
			name: "dataplane",
			in: header + `dataplane:
  mode: iptables
  syncPeriod: 5x
  minSyncPeriod: 30
  clusterCIDRs: [10.0.0.1/8, bad, [1]]
  nodePortAddresses: [192.168.0.0/24]
  ipvs:
    tcpTimeout: -1s
    udpTimeout: 1500ms
`,
			want: []FieldError{
				{Path: "dataplane.mode", Line: 4, Msg: `unknown mode "iptables" (want ipvs or dryrun)`},
				{Path: "dataplane.syncPeriod", Line: 5, Msg: `invalid duration "5x" (want a Go duration such as "30s" or "1m30s")`},
				{Path: "dataplane.minSyncPeriod", Line: 6, Msg: `invalid duration "30" (want a Go duration such as "30s" or "1m30s")`},
				{Path: "dataplane.clusterCIDRs[0]", Line: 7, Msg: `invalid CIDR "10.0.0.1/8": host bits set (want 10.0.0.0/8)`},
				{Path: "dataplane.clusterCIDRs[1]", Line: 7, Msg: `invalid CIDR "bad"`},
				{Path: "dataplane.clusterCIDRs[2]", Line: 7, Msg: `want a CIDR string such as "10.0.0.0/8"`},
				{Path: "dataplane.ipvs.tcpTimeout", Line: 10, Msg: "-1s is negative"},
				{Path: "dataplane.ipvs.udpTimeout", Line: 11, Msg: "1.5s is not a whole number of seconds"},
			},
		},
		{
			name: "forwarding mode and dsr",
			in:   header + "dataplane:\n  forwardingMode: DSR\n  dsr:\n    encapsulation: gre\n    guePort: 70000\n    tableSize: 16380\n    mtu: 600\n",
			want: []FieldError{
				{Path: "dataplane.forwardingMode", Line: 4, Msg: `unknown mode "DSR" (want nat or dsr)`},
				{Path: "dataplane.dsr.encapsulation", Line: 6, Msg: `unknown encapsulation "gre" (want ipip or gue)`},
				{Path: "dataplane.dsr.guePort", Line: 7, Msg: "port 70000 is out of range (want 1 to 65535)"},
				{Path: "dataplane.dsr.tableSize", Line: 8, Msg: "16380: want a prime from 251 to 16777213 (at least 100 times the nodes)"},
				{Path: "dataplane.dsr.mtu", Line: 9, Msg: "600: want 608 to 65535"},
			},
		},
		{
			name: "detectLocal mode",
			in:   header + "dataplane:\n  detectLocal: {mode: nodecidr}\n",
			want: []FieldError{
				{Path: "dataplane.detectLocal.mode", Line: 4, Msg: `unknown mode "nodecidr" (want ClusterCIDR, NodeCIDR, BridgeInterface or InterfaceNamePrefix)`},
			},
		},
		{
			name: "detectLocal interfaces",
			in: header + `dataplane:
  detectLocal:
    mode: BridgeInterface
    bridgeInterface: a-bridge-name-too-long
    interfaceNamePrefix: veth
`,
			want: []FieldError{
				{Path: "dataplane.detectLocal.bridgeInterface", Line: 6, Msg: `"a-bridge-name-too-long" is longer than 15 bytes, the kernel's limit for an interface name`},
				{Path: "dataplane.detectLocal.interfaceNamePrefix", Line: 7, Msg: "set, but mode is BridgeInterface (it is read only with mode InterfaceNamePrefix)"},
			},
		},
		{
			name: "detectLocal interface missing or bad",
			in: header + `dataplane:
  detectLocal: {mode: InterfaceNamePrefix, bridgeInterface: "cni/0"}
`,
			want: []FieldError{
				{Path: "dataplane.detectLocal.bridgeInterface", Line: 4, Msg: "set, but mode is InterfaceNamePrefix (it is read only with mode BridgeInterface)"},
				{Path: "dataplane.detectLocal.interfaceNamePrefix", Line: 4, Msg: "required with mode InterfaceNamePrefix"},
			},
		},
		{
			// The same problems in a v1alpha1 file are reported at the
			// paths and lines the file has.
			name: "dataplane in v1alpha1",
			in: headerV1alpha1 + `dataplane:
  mode: iptables
  ipvs:
    tcpTimeout: -1s
    udpTimeout: 1500ms
    syncPeriod: 5x
    minSyncPeriod: 30
    clusterCIDRs: [10.0.0.1/8, bad, [1]]
    nodePortAddresses: [192.168.0.0/24]
`,
			want: []FieldError{
				{Path: "dataplane.mode", Line: 4, Msg: `unknown mode "iptables" (want ipvs or dryrun)`},
				{Path: "dataplane.ipvs.tcpTimeout", Line: 6, Msg: "-1s is negative"},
				{Path: "dataplane.ipvs.udpTimeout", Line: 7, Msg: "1.5s is not a whole number of seconds"},
				{Path: "dataplane.ipvs.syncPeriod", Line: 8, Msg: `invalid duration "5x" (want a Go duration such as "30s" or "1m30s")`},
				{Path: "dataplane.ipvs.minSyncPeriod", Line: 9, Msg: `invalid duration "30" (want a Go duration such as "30s" or "1m30s")`},
				{Path: "dataplane.ipvs.clusterCIDRs[0]", Line: 10, Msg: `invalid CIDR "10.0.0.1/8": host bits set (want 10.0.0.0/8)`},
				{Path: "dataplane.ipvs.clusterCIDRs[1]", Line: 10, Msg: `invalid CIDR "bad"`},
				{Path: "dataplane.ipvs.clusterCIDRs[2]", Line: 10, Msg: `want a CIDR string such as "10.0.0.0/8"`},
			},
		},
		{
			name: "nodePortAddresses: primary mixed with CIDRs, a bad CIDR",
			in:   header + "dataplane:\n  nodePortAddresses: [10.0.0.0/8, primary, 10.1.2.3/8, prime]\n",
			want: []FieldError{
				{Path: "dataplane.nodePortAddresses[2]", Line: 4, Msg: `invalid CIDR "10.1.2.3/8": host bits set (want 10.0.0.0/8)`},
				{Path: "dataplane.nodePortAddresses[3]", Line: 4, Msg: `invalid CIDR "prime"`},
				{Path: "dataplane.nodePortAddresses[1]", Line: 4,
					Msg: `"primary" cannot be mixed with CIDRs: use [primary] alone, or list CIDRs only`},
			},
		},
		{
			name: "nodePortAddresses: primary mixed with CIDRs",
			in:   header + "dataplane:\n  nodePortAddresses:\n  - 10.0.0.0/8\n  - primary\n",
			want: []FieldError{{Path: "dataplane.nodePortAddresses[1]", Line: 6,
				Msg: `"primary" cannot be mixed with CIDRs: use [primary] alone, or list CIDRs only`}},
		},
		{
			name: "nodePortAddresses: primary twice",
			in:   header + "dataplane:\n  nodePortAddresses: [primary, primary]\n",
			want: []FieldError{{Path: "dataplane.nodePortAddresses[0]", Line: 4,
				Msg: `"primary" cannot be mixed with CIDRs: use [primary] alone, or list CIDRs only`}},
		},
		{
			name: "drain timeout",
			in:   header + "dataplane:\n  ipvs:\n    drainTimeout: -30s\n",
			want: []FieldError{{Path: "dataplane.ipvs.drainTimeout", Line: 5, Msg: "-30s is not positive"}},
		},
		{
			name: "drain timeout in v1alpha1",
			in:   headerV1alpha1 + "dataplane:\n  ipvs:\n    drainTimeout: -1m\n",
			want: []FieldError{{Path: "dataplane.ipvs.drainTimeout", Line: 5, Msg: "-1m0s is not positive"}},
		},
		{
			name: "sync periods out of order",
			in:   header + "dataplane:\n  syncPeriod: 1s\n  minSyncPeriod: 2s\n",
			want: []FieldError{{Path: "dataplane.minSyncPeriod", Line: 5, Msg: "2s is longer than syncPeriod 1s"}},
		},
		{
			name: "sync periods out of order in v1alpha1",
			in:   headerV1alpha1 + "dataplane:\n  ipvs:\n    syncPeriod: 1s\n    minSyncPeriod: 2s\n",
			want: []FieldError{{Path: "dataplane.ipvs.minSyncPeriod", Line: 6, Msg: "2s is longer than syncPeriod 1s"}},
		},
		{
			name: "cluster CIDRs in v1alpha1",
			in:   headerV1alpha1 + "dataplane:\n  ipvs:\n    clusterCIDRs: [10.0.0.0/8, 10.0.0.1/8]\n",
			want: []FieldError{{Path: "dataplane.ipvs.clusterCIDRs[1]", Line: 5, Msg: `invalid CIDR "10.0.0.1/8": host bits set (want 10.0.0.0/8)`}},
		},
		{
			name: "conntrack",
			in: header + `conntrack:
  maxPerCore: -1
  min: -5
  tcpEstablishedTimeout: 1.5s
  tcpCloseWaitTimeout: -1h
  udpTimeout: 100ms
  udpStreamTimeout: 3
`,
			want: []FieldError{
				{Path: "conntrack.maxPerCore", Line: 4, Msg: "-1 is negative"},
				{Path: "conntrack.min", Line: 5, Msg: "-5 is negative"},
				{Path: "conntrack.tcpEstablishedTimeout", Line: 6, Msg: "1.5s is not a whole number of seconds"},
				{Path: "conntrack.tcpCloseWaitTimeout", Line: 7, Msg: "-1h0m0s is negative"},
				{Path: "conntrack.udpTimeout", Line: 8, Msg: "100ms is not a whole number of seconds"},
				{Path: "conntrack.udpStreamTimeout", Line: 9, Msg: `invalid duration "3" (want a Go duration such as "30s" or "1m30s")`},
			},
		},
		{
			name: "policies",
			in:   header + "policies:\n  default: Not_A_Name\n  evaluationDeadline: 0s\n  memoryLimit: 12Xi\n  statisticsInterval: -1s\n",
			want: []FieldError{
				{Path: "policies.default", Line: 4, Msg: `invalid policy "Not_A_Name" (want a ConfigMap name or builtin:<name>)`},
				{Path: "policies.memoryLimit", Line: 6, Msg: `invalid size "12Xi" (want bytes, or a number with Ki, Mi or Gi)`},
				{Path: "policies.statisticsInterval", Line: 7, Msg: "-1s is not positive"},
			},
		},
		{
			name: "policy workers and cache directory",
			in:   header + "policies:\n  workers: -1\n  cacheDir: var/cache\n",
			want: []FieldError{
				{Path: "policies.workers", Line: 4, Msg: "-1 is out of range (want 0 to 256; 0 is one per CPU)"},
				{Path: "policies.cacheDir", Line: 5, Msg: `invalid directory "var/cache" (want a clean absolute path, or "" to disable the cache)`},
			},
		},
		{
			name: "too many policy workers, unclean cache directory",
			in:   header + "policies:\n  workers: 257\n  cacheDir: /var/cache/../wasm\n",
			want: []FieldError{
				{Path: "policies.workers", Line: 4, Msg: "257 is out of range (want 0 to 256; 0 is one per CPU)"},
				{Path: "policies.cacheDir", Line: 5, Msg: `invalid directory "/var/cache/../wasm" (want a clean absolute path, or "" to disable the cache)`},
			},
		},
		{
			name: "memory limit too small",
			in:   header + "policies:\n  memoryLimit: 64Ki\n",
			want: []FieldError{{Path: "policies.memoryLimit", Line: 4, Msg: "64Ki is out of range (want 1Mi to 4Gi)"}},
		},
		{
			name: "pools",
			in: header + `pools:
- name: a
  addresses: [192.0.2.0/24, 192.0.2.9-192.0.2.1, 192.0.2.1-2001:db8::1, nope, 192.0.2.1/24]
- name: a
  addresses: []
  namespaces: [Bad_NS]
  serviceSelectors:
  - matchExpressions:
    - {key: a, operator: In}
    - {key: "", operator: Exists, values: [x]}
    - {key: b, operator: Near}
- addresses: [192.0.2.0/24, "fe80::1%eth0/128", "::ffff:1.2.3.4-::ffff:1.2.3.5", 2001:db8::/64, 2001:db8::5-2001:db9::]
`,
			want: []FieldError{
				{Path: "pools[0].addresses[1]", Line: 5, Msg: `invalid range "192.0.2.9-192.0.2.1": last address before first`},
				{Path: "pools[0].addresses[2]", Line: 5, Msg: `invalid range "192.0.2.1-2001:db8::1": mixes IPv4 and IPv6`},
				{Path: "pools[0].addresses[3]", Line: 5, Msg: `invalid CIDR or range "nope"`},
				{Path: "pools[0].addresses[4]", Line: 5, Msg: `invalid CIDR "192.0.2.1/24": host bits set (want 192.0.2.0/24)`},
				{Path: "pools[1].name", Line: 6, Msg: `duplicate name "a"`},
				{Path: "pools[1].addresses", Line: 7, Msg: "at least one CIDR or range is required"},
				{Path: "pools[1].namespaces[0]", Line: 8, Msg: `invalid namespace "Bad_NS"`},
				{Path: "pools[1].serviceSelectors[0].matchExpressions[0].values", Line: 11, Msg: "required for operator In"},
				{Path: "pools[1].serviceSelectors[0].matchExpressions[1].key", Line: 12, Msg: "required"},
				{Path: "pools[1].serviceSelectors[0].matchExpressions[1].values", Line: 12, Msg: "must be empty for operator Exists"},
				{Path: "pools[1].serviceSelectors[0].matchExpressions[2].operator", Line: 13, Msg: `unknown operator "Near" (want In, NotIn, Exists or DoesNotExist)`},
				{Path: "pools[2].name", Line: 14, Msg: "required"},
				{Path: "pools[2].addresses[0]", Line: 14, Msg: `"192.0.2.0/24" overlaps pools[0].addresses[0]`},
				{Path: "pools[2].addresses[1]", Line: 14, Msg: `invalid CIDR or range "fe80::1%eth0/128"`},
				{Path: "pools[2].addresses[2]", Line: 14, Msg: `invalid range "::ffff:1.2.3.4-::ffff:1.2.3.5" (want first-last)`},
				{Path: "pools[2].addresses[4]", Line: 14, Msg: `"2001:db8::5-2001:db9::" overlaps pools[2].addresses[3]`},
			},
		},
		{
			name: "announcers",
			in: header + `pools: [{name: p, addresses: [192.0.2.0/24]}]
announcers:
- name: a
  type: arp
  pools: [p, q]
  bgp: {asn: 1}
- name: b
  type: bgp
- name: c
  type: bgp
  bgp:
    routerID: "::1"
    peers:
    - address: 10.0.0.300
      port: 70000
      holdTime: 1s
      keepaliveTime: 2s
      passwordSecret: {name: s}
      passwordFile: /etc/pw
      ebgpMultihop: 256
      communities: ["1:2", "x"]
- name: d
  type: cloud
  cloud: {url: "ftp://x"}
- name: e
  type: gossip
- name: f
  type: arp
  settings: {x: 1}
- name: g
`,
			want: []FieldError{
				{Path: "announcers[0].pools[1]", Line: 7, Msg: `unknown pool "q"`},
				{Path: "announcers[0].bgp", Line: 8, Msg: `set, but type is "arp"`},
				{Path: "announcers[1].bgp", Line: 9, Msg: "required for type bgp"},
				{Path: "announcers[2].bgp.asn", Line: 14, Msg: "required"},
				{Path: "announcers[2].bgp.routerID", Line: 14, Msg: `invalid router ID "::1" (want an IPv4 address)`},
				{Path: "announcers[2].bgp.peers[0].address", Line: 16, Msg: `invalid IP address "10.0.0.300"`},
				{Path: "announcers[2].bgp.peers[0].asn", Line: 16, Msg: "required"},
				{Path: "announcers[2].bgp.peers[0].port", Line: 17, Msg: "port 70000 is out of range (want 1 to 65535)"},
				{Path: "announcers[2].bgp.peers[0].holdTime", Line: 18, Msg: "1s is shorter than 3s"},
				{Path: "announcers[2].bgp.peers[0].keepaliveTime", Line: 19, Msg: "2s is not between 0s and holdTime 1s"},
				{Path: "announcers[2].bgp.peers[0].passwordSecret.key", Line: 20, Msg: "required"},
				{Path: "announcers[2].bgp.peers[0].passwordFile", Line: 21, Msg: "set passwordSecret or passwordFile, not both"},
				{Path: "announcers[2].bgp.peers[0].ebgpMultihop", Line: 22, Msg: "256 is out of range (want 0 to 255)"},
				{Path: "announcers[2].bgp.peers[0].communities[1]", Line: 23, Msg: `invalid community "x" (want ASN:value, each 0 to 65535)`},
				{Path: "announcers[3].cloud.url", Line: 26, Msg: `invalid URL "ftp://x" (want an absolute http or https URL)`},
				{Path: "announcers[4].type", Line: 28, Msg: `unknown type "gossip" (want arp, bgp or cloud)`},
				{Path: "announcers[5].settings", Line: 31, Msg: `set, but type "arp" takes its settings in "arp"`},
				{Path: "announcers[6].type", Line: 32, Msg: "required"},
			},
		},
		{
			name: "bfd",
			in: header + `announcers:
- name: c
  type: bgp
  bgp:
    asn: 1
    peers:
    - address: 10.0.0.1
      asn: 2
      bfd: {minRx: 5ms, minTx: 2m, multiplier: 256}
    - address: 10.0.0.2
      asn: 2
      bfd: {minRx: 300500ns, minTx: -1s, multiplier: -1}
`,
			want: []FieldError{
				{Path: "announcers[0].bgp.peers[0].bfd.minRx", Line: 11, Msg: "5ms is out of range (want whole microseconds from 10ms to 1m0s)"},
				{Path: "announcers[0].bgp.peers[0].bfd.minTx", Line: 11, Msg: "2m0s is out of range (want whole microseconds from 10ms to 1m0s)"},
				{Path: "announcers[0].bgp.peers[0].bfd.multiplier", Line: 11, Msg: "256 is out of range (want 1 to 255)"},
				{Path: "announcers[0].bgp.peers[1].bfd.minRx", Line: 14, Msg: "300.5µs is out of range (want whole microseconds from 10ms to 1m0s)"},
				{Path: "announcers[0].bgp.peers[1].bfd.minTx", Line: 14, Msg: "-1s is out of range (want whole microseconds from 10ms to 1m0s)"},
				{Path: "announcers[0].bgp.peers[1].bfd.multiplier", Line: 14, Msg: "-1 is out of range (want 1 to 255)"},
			},
		},
		{
			name: "graceful restart time",
			in: header + `announcers:
- {name: a, type: bgp, bgp: {asn: 1, gracefulRestart: {enabled: true, restartTime: 4096s}, peers: [{address: 10.0.0.1, asn: 2}]}}
- {name: b, type: bgp, bgp: {asn: 1, gracefulRestart: {enabled: true, restartTime: 1500ms}, peers: [{address: 10.0.0.1, asn: 2}]}}
- {name: c, type: bgp, bgp: {asn: 1, gracefulRestart: {enabled: true, restartTime: -1s}, peers: [{address: 10.0.0.1, asn: 2}]}}
- {name: d, type: bgp, bgp: {asn: 1, gracefulRestart: {enabled: true, restartTime: 4095s}, peers: [{address: 10.0.0.1, asn: 2}]}}
`,
			want: []FieldError{
				{Path: "announcers[0].bgp.gracefulRestart.restartTime", Line: 4, Msg: "1h8m16s is out of range (want whole seconds from 1s to 1h8m15s)"},
				{Path: "announcers[1].bgp.gracefulRestart.restartTime", Line: 5, Msg: "1.5s is out of range (want whole seconds from 1s to 1h8m15s)"},
				{Path: "announcers[2].bgp.gracefulRestart.restartTime", Line: 6, Msg: "-1s is out of range (want whole seconds from 1s to 1h8m15s)"},
			},
		},
		{
			name: "membership encryption",
			in: header + `membership:
  secretKeySecret: {name: Bad_Name}
  secretKeyFile: /etc/switchyard/gossip/keys
`,
			want: []FieldError{
				{Path: "membership.secretKeySecret.name", Line: 4, Msg: `invalid Secret name "Bad_Name"`},
				{Path: "membership.secretKeySecret.key", Line: 4, Msg: "required"},
				{Path: "membership.secretKeyFile", Line: 5, Msg: "set secretKeySecret or secretKeyFile, not both"},
			},
		},
		{
			name: "membership timing",
			in: header + `membership: {probeInterval: 5ms, probeTimeout: -1s, suspicionMult: 21}
`,
			want: []FieldError{
				{Path: "membership.probeInterval", Line: 3, Msg: "5ms is out of range (want 10ms to 1m0s)"},
				{Path: "membership.probeTimeout", Line: 3, Msg: "-1s is not positive"},
				{Path: "membership.suspicionMult", Line: 3, Msg: "21 is out of range (want 1 to 20)"},
			},
		},
		{
			name: "membership restart grace negative",
			in: header + `membership: {restartGrace: -1s}
`,
			want: []FieldError{{Path: "membership.restartGrace", Line: 3, Msg: "-1s is out of range (want 0 to 10m0s)"}},
		},
		{
			name: "membership restart grace too long",
			in: header + `membership: {restartGrace: 11m}
`,
			want: []FieldError{{Path: "membership.restartGrace", Line: 3, Msg: "11m0s is out of range (want 0 to 10m0s)"}},
		},
		{
			name: "membership probe timeout not shorter than the interval",
			in: header + `membership: {probeInterval: 200ms, probeTimeout: 200ms, suspicionMult: -1}
`,
			want: []FieldError{
				{Path: "membership.probeTimeout", Line: 3, Msg: "200ms is not shorter than probeInterval 200ms"},
				{Path: "membership.suspicionMult", Line: 3, Msg: "-1 is out of range (want 1 to 20)"},
			},
		},
		{
			name: "addresses and class",
			in: header + `membership: {bindAddress: eth0, port: 0}
metrics: {bindAddress: "127.0.0.1"}
health: {bindAddress: "localhost:10256"}
loadBalancerClass: "bad class"
serviceProxyName: "-bad"
`,
			want: []FieldError{
				{Path: "membership.bindAddress", Line: 3, Msg: `invalid IP address "eth0"`},
				{Path: "metrics.bindAddress", Line: 4, Msg: `invalid address "127.0.0.1" (want host:port, such as "127.0.0.1:10249")`},
				{Path: "health.bindAddress", Line: 5, Msg: `invalid address "localhost:10256": host "localhost" is not an IP address`},
				{Path: "loadBalancerClass", Line: 6, Msg: `invalid class "bad class" (want a qualified name such as "switchyard.dev/lb")`},
				{Path: "serviceProxyName", Line: 7, Msg: `invalid label value "-bad" (want up to 63 letters, digits, '-', '_' or '.', alphanumeric at both ends)`},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.in), AnnouncerTypeCheck(BuiltinAnnouncerTypes...))
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", c)
			}
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("error is %T, want Errors: %v", err, err)
			}
			got := make([]FieldError, len(errs))
			for i, e := range errs {
				got[i] = *e
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("errors mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestValidateBuilt checks Validate on a config built in Go rather than
// parsed: problems carry paths but no lines.
func TestValidateBuilt(t *testing.T) {
	c := Default()
	c.Dataplane.Mode = "foo"
	c.Kind = ""
	err := c.Validate()
	want := `kind: missing (want "SwitchyardConfig"); dataplane.mode: unknown mode "foo" (want ipvs or dryrun)`
	if err == nil || err.Error() != want {
		t.Errorf("Validate() = %v, want %s", err, want)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/config.yaml"
	if _, err := Load(path); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want ErrNotExist", err)
	}
	if err := os.WriteFile(path, []byte(header+"dataplane: {ipvs: {scheduler: foo}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path, SchedulerCheck(testSchedulers))
	if err == nil || !strings.Contains(err.Error(), path+": line 3: dataplane.ipvs.scheduler: unknown scheduler") {
		t.Errorf("Load(bad) = %v, want the path, line and field", err)
	}
}

func TestPlanOptions(t *testing.T) {
	c, err := Parse([]byte(header + `dataplane: {nodePortAddresses: [192.168.0.0/24, "fd00::/64"], ipvs: {scheduler: wlc}, forwardingMode: dsr}
loadBalancerClass: example.com/lb
ignoreUnclassed: true
`))
	if err != nil {
		t.Fatal(err)
	}
	want := plan.Options{
		NodePortAddresses: []netip.Prefix{netip.MustParsePrefix("192.168.0.0/24"), netip.MustParsePrefix("fd00::/64")},
		Scheduler:         "wlc",
		LoadBalancerClass: "example.com/lb",
		IgnoreUnclassed:   true,
		ForwardingMode:    model.ForwardingDSR,
		DSREncapsulation:  model.IPIP,
	}
	if diff := cmp.Diff(want, c.PlanOptions(), cmpOpts); diff != "" {
		t.Errorf("PlanOptions mismatch (-want +got):\n%s", diff)
	}
	c, err = Parse([]byte(header + "dataplane: {dsr: {encapsulation: gue}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.PlanOptions().DSREncapsulation; got != model.GUE {
		t.Errorf("PlanOptions of dsr.encapsulation gue: DSREncapsulation %v, want gue", got)
	}
	c, err = Parse([]byte(header + "dataplane: {nodePortAddresses: [primary]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.PlanOptions(); !got.NodePortPrimary || got.NodePortAddresses != nil {
		t.Errorf("PlanOptions of nodePortAddresses [primary] = %+v, want NodePortPrimary and no prefix", got)
	}
	if got := Default().PlanOptions(); got.Scheduler != "rr" || got.LoadBalancerClass != "switchyard.dev/lb" || got.NodePortAddresses != nil || got.ForwardingMode != model.ForwardingNAT {
		t.Errorf("Default().PlanOptions() = %+v", got)
	}
}

func TestByteSize(t *testing.T) {
	tests := []struct {
		in      string
		want    ByteSize
		str     string
		wantErr bool
	}{
		{in: "0", want: 0, str: "0"},
		{in: "1000", want: 1000, str: "1000"},
		{in: "2048", want: 2048, str: "2Ki"},
		{in: "64Ki", want: 64 << 10, str: "64Ki"},
		{in: "32Mi", want: 32 << 20, str: "32Mi"},
		{in: "4Gi", want: 4 << 30, str: "4Gi"},
		{in: "1536Mi", want: 1536 << 20, str: "1536Mi"},
		{in: "17179869184Gi", wantErr: true},
		{in: "1.5Mi", wantErr: true},
		{in: "Mi", wantErr: true},
		{in: "-1", wantErr: true},
		{in: "1MB", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseByteSize(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseByteSize(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if err == nil && (got != tt.want || got.String() != tt.str) {
			t.Errorf("ParseByteSize(%q) = %d (%s), want %d (%s)", tt.in, got, got, tt.want, tt.str)
		}
	}
}

func TestParseAddressRange(t *testing.T) {
	tests := []struct {
		in          string
		first, last string
	}{
		{"192.0.2.0/28", "192.0.2.0", "192.0.2.15"},
		{"192.0.2.7/32", "192.0.2.7", "192.0.2.7"},
		{"10.0.0.0/9", "10.0.0.0", "10.127.255.255"},
		{"192.0.2.10-192.0.2.20", "192.0.2.10", "192.0.2.20"},
		{"192.0.2.10 - 192.0.2.20", "192.0.2.10", "192.0.2.20"},
		{"2001:db8::/120", "2001:db8::", "2001:db8::ff"},
		{"2001:db8::/64", "2001:db8::", "2001:db8::ffff:ffff:ffff:ffff"},
		{"2001:db8::1-2001:db8::1", "2001:db8::1", "2001:db8::1"},
	}
	for _, tt := range tests {
		first, last, err := ParseAddressRange(tt.in)
		if err != nil {
			t.Errorf("ParseAddressRange(%q): %v", tt.in, err)
			continue
		}
		if first.String() != tt.first || last.String() != tt.last {
			t.Errorf("ParseAddressRange(%q) = %s, %s, want %s, %s", tt.in, first, last, tt.first, tt.last)
		}
	}
}

func TestChanged(t *testing.T) {
	a := Default()
	b := Default()
	if got := Changed(a, b); len(got) != 0 {
		t.Errorf("Changed(default, default) = %v, want none", got)
	}
	b.Dataplane.IPVS.Scheduler = "wlc"
	b.Dataplane.IPVS.StrictARP = ptr(false)
	b.Dataplane.ClusterCIDRs = []Prefix{mustPrefix("10.0.0.0/8")}
	b.Pools = []Pool{{Name: "p"}}
	b.Metrics.BindAddress = "127.0.0.1:1"
	b.IgnoreUnclassed = true
	want := []string{
		"dataplane.clusterCIDRs", "dataplane.ipvs.scheduler", "dataplane.ipvs.strictARP",
		"pools", "metrics.bindAddress", "ignoreUnclassed",
	}
	if diff := cmp.Diff(want, Changed(a, b)); diff != "" {
		t.Errorf("Changed mismatch (-want +got):\n%s", diff)
	}
}

// TestPolicyWorkersAndCacheDir checks the values the daemon takes from
// policies.workers and policies.cacheDir: 0 workers is one per CPU, and
// an empty cacheDir disables the cache while a missing one takes the
// default.
func TestPolicyWorkersAndCacheDir(t *testing.T) {
	tests := []struct {
		name        string
		in          string
		wantWorkers int
		wantDir     string
	}{
		{"defaults", header, max(1, runtime.GOMAXPROCS(0)-1), "/var/cache/switchyard/wasm"},
		{"null is the default", header + "policies:\n  cacheDir:\n", max(1, runtime.GOMAXPROCS(0)-1), "/var/cache/switchyard/wasm"},
		{"set", header + "policies:\n  workers: 3\n  cacheDir: /cache\n", 3, "/cache"},
		{"cache disabled", header + "policies:\n  workers: 1\n  cacheDir: \"\"\n", 1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Policies.EvaluationWorkers(); got != tt.wantWorkers {
				t.Errorf("EvaluationWorkers() = %d, want %d", got, tt.wantWorkers)
			}
			if got := c.Policies.CompilationCacheDir(); got != tt.wantDir {
				t.Errorf("CompilationCacheDir() = %q, want %q", got, tt.wantDir)
			}
		})
	}
}

// FuzzParse: Parse never panics on any file, returns a config or an
// Errors whose every entry says something, and a config it returns
// validates again.
func FuzzParse(f *testing.F) {
	full, err := os.ReadFile("testdata/full.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(full)
	f.Add([]byte(header))
	f.Add([]byte(header + "announcers:\n- {name: b, type: bgp, bgp: {asn: 1, peers: [{address: 10.0.0.1, asn: 2, bfd: {minRx: 5ms}}]}}\n"))
	f.Add([]byte(header + "pools: [{name: a, addresses: [192.0.2.1-192.0.2.9, \"2001:db8::/64\"]}]\n"))
	f.Add([]byte("---\n---\n"))
	f.Add([]byte("[1, 2"))
	f.Add([]byte(header + "dataplane: {ipvs: {syncPeriod: 1x}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if (c == nil) == (err == nil) {
			t.Fatalf("Parse = %v, %v: want exactly one of a config and an error", c, err)
		}
		if err != nil {
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("Parse error %v (%T) is not a non-empty Errors", err, err)
			}
			for _, e := range es {
				if e.Msg == "" {
					t.Fatalf("Parse error without a message: %+v", e)
				}
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("a parsed config does not validate again: %v", err)
		}
	})
}
