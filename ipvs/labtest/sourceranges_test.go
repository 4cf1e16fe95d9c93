//go:build linux

package labtest

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/ipvs"
)

// TestDataplaneIPv6SourceRanges checks loadBalancerSourceRanges on IPv6
// LoadBalancer IPs: the client (fd00:244::2, also 10.244.0.2) passes a
// /64 written with host bits set and an exact /128; it is dropped by
// ranges that do not cover its IPv6 address, even when an IPv4 range
// covers its IPv4 address (a range admits only its own family), and
// passes once its /64 is added to them.
func TestDataplaneIPv6SourceRanges(t *testing.T) {
	requireGuest(t)
	clearPlan(t)
	deleteTable(t)
	lb := func(vip string, backend int, ranges ...string) model.VirtualService {
		w := []int{-1, -1, -1}
		w[backend] = 1
		vs := clusterIP(vip, 80, model.TCP, "rr", backends(true, HTTPPort, w...))
		vs.Kind = model.FrontendLoadBalancer
		for _, r := range ranges {
			vs.SourceRanges = append(vs.SourceRanges, netip.MustParsePrefix(r))
		}
		return vs
	}
	plan := planOf(map[string]model.VirtualService{
		"subnet": lb("fd00:96::4:1", 0, "2001:db8::/32", "fd00:244::ffff/64"),
		"exact":  lb("fd00:96::4:2", 1, "10.0.0.0/8", "fd00:244::2/128"),
		"denied": lb("fd00:96::4:3", 2, "10.244.0.0/24", "2001:db8::/32", "fd00:244::3/128"),
	})
	dp := newLabDataplane(t, withFirewall(&countingFirewall{Firewall: ipvs.NewNFTables()}))
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	for _, tc := range []struct {
		name, target, want string
	}{
		{"inside a /64 with host bits", "[fd00:96::4:1]:80", "be1"},
		{"the client's own /128", "[fd00:96::4:2]:80", "be2"},
	} {
		name, _, err := Source(t.Context(), topo.Client, netip.MustParseAddrPort(tc.target))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if diff := cmp.Diff(tc.want, name); diff != "" {
			t.Errorf("%s: answering backend (-want +got):\n%s", tc.name, diff)
		}
	}
	// Outside the ranges the SYN is dropped: no answer within a second,
	// where an allowed connection takes milliseconds.
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if name, src, err := Source(ctx, topo.Client, netip.MustParseAddrPort("[fd00:96::4:3]:80")); err == nil {
		t.Errorf("a client outside the IPv6 loadBalancerSourceRanges got an answer from %s (seen as %s)", name, src)
	}
	// The same service with the client's /64 added answers: the drop was
	// the ranges' doing.
	denied := &plan.Services[svcKey("denied")].VirtualServices[0]
	denied.SourceRanges = append(denied.SourceRanges, netip.MustParsePrefix("fd00:244::/64"))
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Changed: []model.ServiceKey{svcKey("denied")}}); err != nil {
		t.Fatalf("Apply with the client's range added: %v", err)
	}
	if name, _, err := Source(t.Context(), topo.Client, netip.MustParseAddrPort("[fd00:96::4:3]:80")); err != nil || name != "be3" {
		t.Errorf("after adding the client's /64 to the ranges: answer %q, %v; want be3", name, err)
	}
}
