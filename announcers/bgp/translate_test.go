package bgp

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	api "github.com/osrg/gobgp/v3/api"
	"google.golang.org/protobuf/testing/protocmp"
)

// TestAPIPeer checks the translation of a Peer into GoBGP's request.
func TestAPIPeer(t *testing.T) {
	v4 := func(gr bool) *api.AfiSafi {
		a := &api.AfiSafi{Config: &api.AfiSafiConfig{Family: familyIPv4, Enabled: true}}
		if gr {
			a.MpGracefulRestart = &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: true}}
		}
		return a
	}
	v6 := &api.AfiSafi{Config: &api.AfiSafiConfig{Family: familyIPv6, Enabled: true}}
	timers := &api.Timers{Config: &api.TimersConfig{ConnectRetry: 2, HoldTime: 90, KeepaliveInterval: 30}}
	tests := []struct {
		name string
		cfg  Config
		peer Peer
		want *api.Peer
	}{
		{
			name: "defaults",
			peer: Peer{Address: netip.MustParseAddr("10.0.0.1"), ASN: 64513},
			want: &api.Peer{
				Conf:      &api.PeerConf{NeighborAddress: "10.0.0.1", PeerAsn: 64513},
				Timers:    timers,
				Transport: &api.Transport{RemotePort: 179},
				AfiSafis:  []*api.AfiSafi{v4(false)},
			},
		},
		{
			name: "everything set, ebgp multihop, graceful restart",
			cfg: Config{GracefulRestart: GracefulRestart{Enabled: true, RestartTime: 30 * time.Second},
				NextHop6: netip.MustParseAddr("fd00::11")},
			peer: Peer{Address: netip.MustParseAddr("10.0.0.1"), ASN: 64513, Port: 1179,
				SourceAddress: netip.MustParseAddr("10.0.0.11"), HoldTime: 9 * time.Second, KeepaliveTime: 2 * time.Second,
				ConnectRetry: time.Second, Password: "pw", EBGPMultihopTTL: 4},
			want: &api.Peer{
				Conf:            &api.PeerConf{NeighborAddress: "10.0.0.1", PeerAsn: 64513, AuthPassword: "pw"},
				Timers:          &api.Timers{Config: &api.TimersConfig{ConnectRetry: 1, HoldTime: 9, KeepaliveInterval: 2}},
				Transport:       &api.Transport{RemotePort: 1179, LocalAddress: "10.0.0.11"},
				EbgpMultihop:    &api.EbgpMultihop{Enabled: true, MultihopTtl: 4},
				GracefulRestart: &api.GracefulRestart{Enabled: true, RestartTime: 30},
				AfiSafis: []*api.AfiSafi{v4(true), {
					Config:            &api.AfiSafiConfig{Family: familyIPv6, Enabled: true},
					MpGracefulRestart: &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: true}},
				}},
			},
		},
		{
			name: "multihop ignored on ibgp; ipv6 session",
			peer: Peer{Address: netip.MustParseAddr("fd00::1"), ASN: 64512, EBGPMultihopTTL: 4},
			want: &api.Peer{
				Conf:      &api.PeerConf{NeighborAddress: "fd00::1", PeerAsn: 64512},
				Timers:    timers,
				Transport: &api.Transport{RemotePort: 179},
				AfiSafis:  []*api.AfiSafi{v6},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.LocalASN, cfg.RouterID = 64512, netip.MustParseAddr("10.0.0.11")
			cfg.Peers = []Peer{tc.peer}
			cfg = cfg.withDefaults()
			if err := cfg.validate(); err != nil {
				t.Fatalf("validate: %v", err)
			}
			got := cfg.apiPeer(cfg.Peers[0])
			if d := cmp.Diff(tc.want, got, protocmp.Transform()); d != "" {
				t.Errorf("apiPeer (-want +got):\n%s", d)
			}
		})
	}
}
