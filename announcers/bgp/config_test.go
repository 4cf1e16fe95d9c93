package bgp

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestConfigDefaults(t *testing.T) {
	in := Config{LocalASN: 64512, RouterID: netip.MustParseAddr("10.0.0.11"),
		GracefulRestart: GracefulRestart{Enabled: true},
		Peers: []Peer{
			{Address: netip.MustParseAddr("10.0.0.1"), ASN: 64513},
			{Address: netip.MustParseAddr("10.0.0.2"), ASN: 64514, Port: 1179, HoldTime: 9 * time.Second, ConnectRetry: time.Second},
		}}
	want := Config{Name: "bgp", LocalASN: 64512, RouterID: netip.MustParseAddr("10.0.0.11"),
		GracefulRestart: GracefulRestart{Enabled: true, RestartTime: 120 * time.Second},
		Peers: []Peer{
			{Address: netip.MustParseAddr("10.0.0.1"), ASN: 64513, Port: 179, HoldTime: 90 * time.Second, KeepaliveTime: 30 * time.Second, ConnectRetry: 2 * time.Second},
			{Address: netip.MustParseAddr("10.0.0.2"), ASN: 64514, Port: 1179, HoldTime: 9 * time.Second, KeepaliveTime: 3 * time.Second, ConnectRetry: time.Second},
		}}
	got := in.withDefaults()
	if d := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); d != "" {
		t.Errorf("withDefaults (-want +got):\n%s", d)
	}
	if err := got.validate(); err != nil {
		t.Errorf("validate(defaulted) = %v", err)
	}
	if in.Peers[0].Port != 0 {
		t.Errorf("withDefaults modified its receiver's peers")
	}
}

func TestConfigValidate(t *testing.T) {
	ok := func() Config {
		return Config{LocalASN: 64512, RouterID: netip.MustParseAddr("10.0.0.11"),
			Peers: []Peer{{Address: netip.MustParseAddr("10.0.0.1"), ASN: 64513}}}
	}
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr []string // substrings, all present; none means valid
	}{
		{name: "valid", mutate: func(*Config) {}},
		{name: "valid communities", mutate: func(c *Config) { c.Peers[0].Communities = []string{"0:0", "65535:65535", "no-export"} }},
		{name: "valid ipv6 peer with source", mutate: func(c *Config) {
			c.Peers[0].Address, c.Peers[0].SourceAddress = netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::11")
		}},
		{name: "missing ASN and router ID", mutate: func(c *Config) { c.LocalASN = 0; c.RouterID = netip.Addr{} },
			wantErr: []string{"local ASN is required", "router ID"}},
		{name: "ipv6 router ID", mutate: func(c *Config) { c.RouterID = netip.MustParseAddr("fd00::1") }, wantErr: []string{"router ID"}},
		{name: "next hops of the wrong family", mutate: func(c *Config) {
			c.NextHop4, c.NextHop6 = netip.MustParseAddr("fd00::1"), netip.MustParseAddr("10.0.0.1")
		}, wantErr: []string{"IPv4 next hop fd00::1", "IPv6 next hop 10.0.0.1"}},
		{name: "listen port", mutate: func(c *Config) { c.ListenPort = 70000 }, wantErr: []string{"listen port 70000"}},
		{name: "restart time", mutate: func(c *Config) { c.GracefulRestart = GracefulRestart{Enabled: true, RestartTime: time.Hour * 2} },
			wantErr: []string{"graceful restart time"}},
		{name: "peer without address and ASN", mutate: func(c *Config) { c.Peers[0] = Peer{} },
			wantErr: []string{"peer 0", "address is required", "ASN is required"}},
		{name: "duplicate peer", mutate: func(c *Config) { c.Peers = append(c.Peers, c.Peers[0]) },
			wantErr: []string{"peer 1: duplicate address 10.0.0.1"}},
		{name: "source family", mutate: func(c *Config) { c.Peers[0].SourceAddress = netip.MustParseAddr("fd00::1") },
			wantErr: []string{"differ in family"}},
		{name: "timers", mutate: func(c *Config) {
			c.Peers[0].HoldTime, c.Peers[0].KeepaliveTime, c.Peers[0].ConnectRetry = 2*time.Second, 1500*time.Millisecond, 10*time.Millisecond
		}, wantErr: []string{"hold time 2s", "keepalive time 1.5s", "connect retry 10ms"}},
		{name: "keepalive not below hold", mutate: func(c *Config) {
			c.Peers[0].HoldTime, c.Peers[0].KeepaliveTime = 9*time.Second, 9*time.Second
		}, wantErr: []string{"keepalive time 9s"}},
		{name: "valid bfd", mutate: func(c *Config) {
			c.Peers[0].BFD = &BFD{MinRx: 300 * time.Millisecond, MinTx: 10 * time.Millisecond, Multiplier: 3}
		}},
		{name: "bfd out of range", mutate: func(c *Config) {
			c.Peers[0].BFD = &BFD{MinRx: 5 * time.Millisecond, MinTx: 2 * time.Minute}
		}, wantErr: []string{"bfd minRx 5ms", "bfd minTx 2m0s", "bfd multiplier must be at least 1"}},
		{name: "bfd below a microsecond", mutate: func(c *Config) {
			c.Peers[0].BFD = &BFD{MinRx: 300*time.Millisecond + 1, MinTx: 300 * time.Millisecond, Multiplier: 3}
		}, wantErr: []string{"bfd minRx 300.000001ms: want whole microseconds"}},
		{name: "bad communities", mutate: func(c *Config) { c.Peers[0].Communities = []string{"65536:1", "1:x", "nope", "12"} },
			wantErr: []string{`"65536:1"`, `"1:x"`, `"nope"`, `"12"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := ok()
			tc.mutate(&c)
			err := c.withDefaults().validate()
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("validate = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("validate = nil, want errors containing %q", tc.wantErr)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("validate = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}
