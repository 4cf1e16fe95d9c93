package main

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/switchyard-lb/switchyard/announcers/bgp"
	"github.com/switchyard-lb/switchyard/core/config"
	"github.com/switchyard-lb/switchyard/core/ipam"
	"github.com/switchyard-lb/switchyard/core/model"
)

// TestAnnouncerSlot: an announcer's pools and node selector follow
// reloads of the pools and of the announcer.
func TestAnnouncerSlot(t *testing.T) {
	pools := ipamPools([]config.Pool{
		{Name: "public", Addresses: []string{"192.0.2.0/28", "2001:db8::/120"}},
		{Name: "range", Addresses: []string{"198.51.100.10-198.51.100.20"}},
		{Name: "other", Addresses: []string{"203.0.113.0/24"}},
	})
	ac := config.Announcer{Name: "l2", Type: config.AnnouncerARP, Pools: []string{"public", "range"}}
	s := newAnnouncerSlot(ac, pools)
	check := func(when string, want map[string]bool) {
		t.Helper()
		for addr, want := range want {
			if got := s.serves(netip.MustParseAddr(addr)); got != want {
				t.Errorf("%s: serves(%s) = %v, want %v", when, addr, got, want)
			}
		}
	}
	check("at start", map[string]bool{
		"192.0.2.15": true, "192.0.2.16": false, "2001:db8::ff": true, "2001:db8::1:0": false,
		"198.51.100.10": true, "198.51.100.20": true, "198.51.100.21": false, "203.0.113.1": false,
	})
	if !s.Matches(map[string]string{"any": "node"}) {
		t.Error("an announcer without a node selector does not match every node")
	}
	// A reload grows "public" and shrinks "range".
	pools = ipamPools([]config.Pool{
		{Name: "public", Addresses: []string{"192.0.2.0/27"}},
		{Name: "range", Addresses: []string{"198.51.100.10-198.51.100.11"}},
		{Name: "other", Addresses: []string{"203.0.113.0/24"}},
	})
	s.setPools(pools)
	check("after a reload of the pools", map[string]bool{
		"192.0.2.16": true, "2001:db8::ff": false, "198.51.100.11": true, "198.51.100.12": false, "203.0.113.1": false,
	})
	// A reload of the announcer: other pools, a node selector.
	next := ac
	next.Pools, next.NodeSelector = []string{"other"}, map[string]string{"edge": "true"}
	if err := s.reloadable(next); err != nil {
		t.Fatalf("reloadable(pools and nodeSelector) = %v", err)
	}
	s.apply(next, pools)
	check("after a reload of the announcer", map[string]bool{"192.0.2.1": false, "203.0.113.1": true})
	if s.Matches(map[string]string{"any": "node"}) || !s.Matches(map[string]string{"edge": "true"}) {
		t.Error("the reloaded node selector is not in force")
	}
	next.Pools = nil
	s.apply(next, pools)
	check("without pools", map[string]bool{"192.0.2.1": true, "10.0.0.1": true})

	other := next
	other.ARP = &config.ARPAnnouncer{Interfaces: []string{"eth1"}}
	if err := s.reloadable(other); err == nil {
		t.Error("reloadable accepted a change of the ARP settings")
	}
}

func TestIPAMPools(t *testing.T) {
	no := false
	got := ipamPools([]config.Pool{
		{Name: "a", Addresses: []string{"192.0.2.0/28"}},
		{Name: "b", Addresses: []string{"192.0.2.16/28"}, AutoAssign: &no, AvoidBuggyIPs: true, Namespaces: []string{"prod"},
			ServiceSelectors: []config.LabelSelector{{MatchLabels: map[string]string{"tier": "edge"},
				MatchExpressions: []config.LabelSelectorRequirement{{Key: "env", Operator: "In", Values: []string{"prod"}}}}}},
	})
	want := []ipam.Pool{
		{Name: "a", Addresses: []string{"192.0.2.0/28"}, AutoAssign: true},
		{Name: "b", Addresses: []string{"192.0.2.16/28"}, AvoidBuggyIPs: true, Namespaces: []string{"prod"},
			ServiceSelectors: []ipam.Selector{{MatchLabels: map[string]string{"tier": "edge"},
				MatchExpressions: []ipam.Requirement{{Key: "env", Operator: ipam.OpIn, Values: []string{"prod"}}}}}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ipamPools (-want +got):\n%s", diff)
	}
}

func TestBGPConfig(t *testing.T) {
	pwFile := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pwFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	self := &model.Node{Name: "node-a", Labels: map[string]string{"rack": "r1"},
		Addresses: []netip.Addr{netip.MustParseAddr("fd00::1"), netip.MustParseAddr("10.0.0.1")}}
	ann := func(b config.BGPAnnouncer) config.Announcer {
		return config.Announcer{Name: "tor", Type: config.AnnouncerBGP, BGP: &b}
	}
	tests := []struct {
		name        string
		ac          config.Announcer
		want        bgp.Config
		wantSecrets []string // announcer, peer, Secret/key
		wantErr     bool
	}{
		{
			name: "router ID from the node, password file, selected peers only",
			ac: ann(config.BGPAnnouncer{ASN: 64512, Peers: []config.BGPPeer{
				{Address: "10.0.0.254", ASN: 64513, Port: 1179, HoldTime: config.Duration(9 * time.Second),
					PasswordFile: pwFile, EBGPMultihop: 2, Communities: []string{"64512:1"}, NodeSelector: map[string]string{"rack": "r1"}},
				{Address: "10.0.1.254", ASN: 64513, NodeSelector: map[string]string{"rack": "r2"}},
			}}),
			want: bgp.Config{Name: "tor", LocalASN: 64512, RouterID: netip.MustParseAddr("10.0.0.1"), Peers: []bgp.Peer{{
				Address: netip.MustParseAddr("10.0.0.254"), ASN: 64513, Port: 1179, HoldTime: 9 * time.Second,
				Password: "s3cret", EBGPMultihopTTL: 2, Communities: []string{"64512:1"},
			}}},
		},
		{
			name: "configured router ID",
			ac:   ann(config.BGPAnnouncer{ASN: 64512, RouterID: "192.0.2.1", ListenPort: 1790}),
			want: bgp.Config{Name: "tor", LocalASN: 64512, RouterID: netip.MustParseAddr("192.0.2.1"), ListenPort: 1790},
		},
		{
			name: "a peer with a password Secret is down until the Secret is read",
			ac:   ann(config.BGPAnnouncer{ASN: 64512, Peers: []config.BGPPeer{{Address: "10.0.0.254", ASN: 1, PasswordSecret: &config.SecretKeyRef{Name: "bgp", Key: "pw"}}}}),
			want: bgp.Config{Name: "tor", LocalASN: 64512, RouterID: netip.MustParseAddr("10.0.0.1"), Peers: []bgp.Peer{{
				Address: netip.MustParseAddr("10.0.0.254"), ASN: 1, AdminDown: true,
			}}},
			wantSecrets: []string{"tor 10.0.0.254 bgp/pw"},
		},
		{
			name:    "missing password file",
			ac:      ann(config.BGPAnnouncer{ASN: 64512, Peers: []config.BGPPeer{{Address: "10.0.0.254", ASN: 1, PasswordFile: pwFile + ".missing"}}}),
			wantErr: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, secrets, err := bgpConfig(tt.ac, self)
			if (err != nil) != tt.wantErr {
				t.Fatalf("bgpConfig error = %v, want error %v", err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
				t.Errorf("bgpConfig (-want +got):\n%s", diff)
			}
			var gotSecrets []string
			for _, sp := range secrets {
				gotSecrets = append(gotSecrets, fmt.Sprintf("%s %s %s/%s", sp.announcer, sp.peer, sp.ref.Name, sp.ref.Key))
			}
			if diff := cmp.Diff(tt.wantSecrets, gotSecrets); diff != "" {
				t.Errorf("bgpConfig's Secret peers (-want +got):\n%s", diff)
			}
		})
	}

	// Without an IPv4 address and a configured router ID there is none.
	if _, _, err := bgpConfig(ann(config.BGPAnnouncer{ASN: 64512}), &model.Node{Name: "v6", Addresses: []netip.Addr{netip.MustParseAddr("fd00::1")}}); err == nil {
		t.Error("bgpConfig without an IPv4 router ID succeeded")
	}
}

// TestDaemonAllocatesAndReloadsPools runs the daemon with a pool over a
// fake clientset: the allocator takes the Lease and reports the pool,
// and a reload that adds a pool applies it without a restart.
func TestDaemonAllocatesAndReloadsPools(t *testing.T) {
	const pools = "pools:\n  - name: public\n    addresses: [192.0.2.0/28]\n"
	d := startDaemon(t, pools)
	d.waitMetric(t, `switchyard_pool_addresses_total{pool="public"} 16`)
	d.waitMetric(t, `switchyard_pool_addresses_used{pool="public"} 0`)

	d.tc.write(t, pools+"  - name: private\n    addresses: [10.10.0.10-10.10.0.13]\n    autoAssign: false\n")
	d.waitMetric(t, `switchyard_pool_addresses_total{pool="private"} 4`)
	if logs := d.logs.String(); !strings.Contains(logs, `"applied":"pools"`) || strings.Contains(logs, `"fields":"pools"`) {
		t.Errorf("the pools reload was not applied live; logs:\n%s", logs)
	}
}
