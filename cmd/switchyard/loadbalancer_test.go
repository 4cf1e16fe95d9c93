package main

import (
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

func TestServedBy(t *testing.T) {
	pools := ipamPools([]config.Pool{
		{Name: "public", Addresses: []string{"192.0.2.0/28", "2001:db8::/120"}},
		{Name: "range", Addresses: []string{"198.51.100.10-198.51.100.20"}},
		{Name: "other", Addresses: []string{"203.0.113.0/24"}},
	})
	if servedBy(pools, nil) != nil {
		t.Error("servedBy without pools is not nil (every address)")
	}
	serves := servedBy(pools, []string{"public", "range"})
	for addr, want := range map[string]bool{
		"192.0.2.15": true, "192.0.2.16": false, "2001:db8::ff": true, "2001:db8::1:0": false,
		"198.51.100.10": true, "198.51.100.20": true, "198.51.100.21": false, "203.0.113.1": false,
	} {
		if got := serves(netip.MustParseAddr(addr)); got != want {
			t.Errorf("serves(%s) = %v, want %v", addr, got, want)
		}
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
		name    string
		ac      config.Announcer
		want    bgp.Config
		wantErr bool
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
			name:    "a Secret reference cannot be read",
			ac:      ann(config.BGPAnnouncer{ASN: 64512, Peers: []config.BGPPeer{{Address: "10.0.0.254", ASN: 1, PasswordSecret: &config.SecretKeyRef{Name: "bgp", Key: "pw"}}}}),
			wantErr: true,
		},
		{
			name:    "missing password file",
			ac:      ann(config.BGPAnnouncer{ASN: 64512, Peers: []config.BGPPeer{{Address: "10.0.0.254", ASN: 1, PasswordFile: pwFile + ".missing"}}}),
			wantErr: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := bgpConfig(tt.ac, self)
			if (err != nil) != tt.wantErr {
				t.Fatalf("bgpConfig error = %v, want error %v", err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
				t.Errorf("bgpConfig (-want +got):\n%s", diff)
			}
		})
	}

	// Without an IPv4 address and a configured router ID there is none.
	if _, err := bgpConfig(ann(config.BGPAnnouncer{ASN: 64512}), &model.Node{Name: "v6", Addresses: []netip.Addr{netip.MustParseAddr("fd00::1")}}); err == nil {
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
