//go:build peers

package arp_test

import (
	"net"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/announcers/arp"
	"github.com/switchyard-lb/switchyard/test/netns"
)

// linkSummary is what Open decided about one interface.
type linkSummary struct {
	Name      string
	MAC       string
	ARP, NDP  bool
	LinkLocal bool
	Only      []netip.Prefix
}

func TestPeersOpen(t *testing.T) {
	netns.Require(t)
	sw := netns.NewBridge(t, "sw")
	n := netns.New(t, "node")
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 0x0a}
	sw.Attach(t, n, "eth0", mac, netip.MustParsePrefix("10.0.0.11/24"), netip.MustParsePrefix("fd00::11/64"))
	sw.Attach(t, n, "v4only", nil, netip.MustParsePrefix("10.1.0.11/16"))
	sw.Attach(t, n, "llonly", nil) // IPv6 link-local only
	n.Run(t, "sysctl", "-qw", "net.ipv6.conf.v4only.disable_ipv6=1")
	down := netip.MustParsePrefix("10.2.0.11/24")
	sw.Attach(t, n, "isdown", nil, down)
	n.Run(t, "ip", "link", "set", "isdown", "down")

	open := func(names []string) ([]linkSummary, error) {
		var got []linkSummary
		err := n.Do(func() error {
			links, err := arp.Open(names)
			if err != nil {
				return err
			}
			for _, l := range links {
				got = append(got, linkSummary{l.Name, l.MAC.String(), l.ARP != nil, l.NDP != nil, l.LinkLocal.IsValid(), l.Only})
			}
			// Close them through an announcer, the only owner of sockets.
			return arp.New(links, arp.Options{}).Close()
		})
		return got, err
	}
	prefixCmp := cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })

	got, err := open(nil)
	if err != nil {
		t.Fatalf("Open(nil): %v", err)
	}
	want := []linkSummary{
		{Name: "eth0", MAC: mac.String(), ARP: true, NDP: true, LinkLocal: true,
			Only: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("fd00::/64")}},
		{Name: "v4only", ARP: true, Only: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}},
	}
	for i := range got {
		if got[i].Name != "eth0" {
			got[i].MAC = "" // random
		}
	}
	if diff := cmp.Diff(want, got, prefixCmp); diff != "" {
		t.Errorf("Open(nil) (-want +got):\n%s", diff)
	}

	got, err = open([]string{"llonly"})
	if err != nil {
		t.Fatalf("Open(llonly): %v", err)
	}
	if len(got) != 1 || got[0].ARP || !got[0].NDP || len(got[0].Only) != 0 {
		t.Errorf("Open(llonly) = %+v, want one IPv6-only link with no subnet limit", got)
	}
	if _, err := open([]string{"eth0", "nosuch"}); err == nil {
		t.Error("Open with an unknown interface succeeded")
	}
}
