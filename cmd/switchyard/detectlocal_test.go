package main

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchyard-lb/switchyard/core/config"
	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/ipvs/ipvstest"
)

func TestLocalDetector(t *testing.T) {
	cidrs := []config.Prefix{config.Prefix(netip.MustParsePrefix("10.244.0.0/16")), config.Prefix(netip.MustParsePrefix("fd00:244::/56"))}
	for _, tc := range []struct {
		mode, bridge, prefix string
		want                 ipvs.LocalDetector
	}{
		{mode: config.LocalModeClusterCIDR, want: ipvs.LocalDetector{CIDRs: config.Prefixes(cidrs)}},
		{mode: config.LocalModeNodeCIDR}, // the Node's, later: podCIDRFollower
		{mode: config.LocalModeBridgeInterface, bridge: "cni0", want: ipvs.LocalDetector{Interface: "cni0"}},
		{mode: config.LocalModeInterfaceNamePrefix, prefix: "veth", want: ipvs.LocalDetector{InterfacePrefix: "veth"}},
	} {
		d := config.Dataplane{ClusterCIDRs: cidrs, DetectLocal: config.DetectLocal{Mode: tc.mode, BridgeInterface: tc.bridge, InterfaceNamePrefix: tc.prefix}}
		if diff := cmp.Diff(tc.want, localDetector(d), cmpopts.EquateComparable(netip.Prefix{}), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.mode, diff)
		}
	}
}

// TestDaemonFollowsNodePodCIDRs runs the daemon with the default config
// (detect-local mode NodeCIDR) on the IPVS dataplane over the ipvs fakes:
// the nftables spec detects no pods while the Node has no pod CIDRs, then
// this node's pod CIDRs once the Node has them, and follows a change.
func TestDaemonFollowsNodePodCIDRs(t *testing.T) {
	fw := &ipvstest.FakeFirewall{}
	dps := make(chan *ipvs.Dataplane, 1)
	d := startDaemonWith(t, "", fakeIPVS(dps, func(c *ipvs.Config) { c.Firewall = fw }))
	<-dps
	waitLocal := func(want ...string) {
		t.Helper()
		var cidrs []netip.Prefix
		for _, s := range want {
			cidrs = append(cidrs, netip.MustParsePrefix(s))
		}
		poll(t, 2*time.Minute, func() error {
			specs := fw.Specs()
			if len(specs) == 0 {
				return fmt.Errorf("no firewall spec synced yet")
			}
			if got := specs[len(specs)-1].Local; !got.Equal(ipvs.LocalDetector{CIDRs: cidrs}) {
				return fmt.Errorf("firewall detects pods by %+v, want %v", got, cidrs)
			}
			return nil
		})
	}
	waitLocal()
	setPodCIDRs := func(cidrs ...string) {
		t.Helper()
		n, err := d.client.CoreV1().Nodes().Get(t.Context(), "node-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Spec.PodCIDR, n.Spec.PodCIDRs = cidrs[0], cidrs
		if _, err := d.client.CoreV1().Nodes().Update(t.Context(), n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setPodCIDRs("10.244.1.0/24", "fd00:244:1::/64")
	waitLocal("10.244.1.0/24", "fd00:244:1::/64")
	setPodCIDRs("10.244.7.0/24")
	waitLocal("10.244.7.0/24")
}
