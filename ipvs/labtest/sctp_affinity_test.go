//go:build linux

package labtest

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
)

// TestDataplaneSCTPAffinity checks ClientIP session affinity for SCTP over
// IPv4 and IPv6: IPVS holds the persistence timeout, and every new
// association from one client, each from its own source port, reaches one
// backend, while the same backends without affinity share them evenly.
func TestDataplaneSCTPAffinity(t *testing.T) {
	requireGuest(t)
	if !topo.SCTP {
		t.Fatal("the guest kernel has no SCTP sockets: is sctp in test/lab's module list?")
	}
	clearPlan(t)
	sticky := func(vip string, v6 bool) model.VirtualService {
		vs := clusterIP(vip, SCTPPort, model.SCTP, "rr", backends(v6, SCTPPort, 1, 1, 1))
		vs.AffinityTimeout = 3 * time.Hour
		return vs
	}
	plan := planOf(map[string]model.VirtualService{
		"sticky":  sticky("10.96.3.40", false),
		"sticky6": sticky("fd00:96::3:40", true),
		"spread":  clusterIP("10.96.3.41", SCTPPort, model.SCTP, "rr", backends(false, SCTPPort, 1, 1, 1)),
	})
	dp := newLabDataplane(t)
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	table, _ := kernelDump(t)
	for _, name := range []string{
		"SCTP/10.96.3.40:9132 rr flags=0x1 persist=3h0m0s",
		"SCTP/fd00:96::3:40:9132 rr flags=0x1 persist=3h0m0s",
		"SCTP/10.96.3.41:9132 rr flags=0x0 persist=0s",
	} {
		if _, ok := table[name]; !ok {
			t.Errorf("IPVS has no %s; it has %v", name, table)
		}
	}
	for _, tc := range []struct {
		name   string
		from   *Namespace
		target string
		n      int
	}{
		{"IPv4 from a pod", topo.Client, "10.96.3.40", 9},
		{"IPv4 from the node", Root, "10.96.3.40", 6},
		{"IPv6 from a pod", topo.Client, "fd00:96::3:40", 9},
	} {
		got, err := SplitSCTP(tc.from, netip.AddrPortFrom(netip.MustParseAddr(tc.target), SCTPPort), tc.n)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if len(got) != 1 {
			t.Errorf("%s: associations per backend %v, want all %d on one backend", tc.name, got, tc.n)
		}
	}
	got, err := SplitSCTP(topo.Client, netip.AddrPortFrom(netip.MustParseAddr("10.96.3.41"), SCTPPort), 9)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int{"be1": 3, "be2": 3, "be3": 3}, got); diff != "" {
		t.Errorf("without affinity: associations per backend (-want +got):\n%s", diff)
	}
}
