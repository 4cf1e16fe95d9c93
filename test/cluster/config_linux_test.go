package cluster

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/config"
)

// TestDefaultDaemonConfig: the daemons' config is valid for the daemon's
// own parser, and its pools and BGP peers (the router over IPv4 and IPv6)
// are the address plan's.
func TestDefaultDaemonConfig(t *testing.T) {
	c, err := config.Parse([]byte(DefaultDaemonConfig))
	if err != nil {
		t.Fatal(err)
	}
	shipped, err := config.Parse([]byte(ShippedGossipDaemonConfig))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(config.Default().Membership, shipped.Membership); diff != "" {
		t.Errorf("ShippedGossipDaemonConfig's membership is not the shipped one (-want +got):\n%s", diff)
	}
	tolerant := config.Default().Membership
	tolerant.ProbeInterval = config.Duration(time.Second)
	tolerant.ProbeTimeout = config.Duration(500 * time.Millisecond)
	tolerant.SuspicionMult = 4
	if diff := cmp.Diff(tolerant, c.Membership); diff != "" {
		t.Errorf("DefaultDaemonConfig's membership (-want +got):\n%s", diff)
	}
	shipped.Membership = c.Membership
	if diff := cmp.Diff(c, shipped); diff != "" {
		t.Errorf("the two configs differ beyond gossip timing (-default +shipped):\n%s", diff)
	}
	pools := map[string][]string{}
	for _, p := range c.Pools {
		pools[p.Name] = p.Addresses
		if *p.AutoAssign {
			t.Errorf("pool %s assigns automatically; the suites name their pool", p.Name)
		}
	}
	want := map[string][]string{PoolL2: {L2Pool.String()}, PoolBGP: {BGPPool.String(), BGPPool6.String()}}
	if diff := cmp.Diff(want, pools); diff != "" {
		t.Errorf("pools (-want +got):\n%s", diff)
	}
	if !LANPrefix.Contains(L2Pool.Addr()) {
		t.Errorf("layer-2 pool %s is not on the LAN %s", L2Pool, LANPrefix)
	}
	var peers []string
	for _, a := range c.Announcers {
		if a.BGP == nil {
			continue
		}
		if a.BGP.ASN != NodeASN {
			t.Errorf("announcer %s: ASN %d, want %d", a.Name, a.BGP.ASN, NodeASN)
		}
		for _, p := range a.BGP.Peers {
			if p.ASN != RouterASN {
				t.Errorf("peer %s: ASN %d, want %d", p.Address, p.ASN, RouterASN)
			}
			peers = append(peers, p.Address)
		}
	}
	if diff := cmp.Diff([]string{RouterLAN.String(), RouterLAN6.String()}, peers); diff != "" {
		t.Errorf("BGP peers (-want +got):\n%s", diff)
	}
}
