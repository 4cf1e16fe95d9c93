//go:build linux

package labtest

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/cloudflare/ipvs"
	"github.com/cloudflare/ipvs/netmask"
	"github.com/google/go-cmp/cmp"
)

// IPVS publishes connection counters on its estimator's tick, every 2 s
// of guest time. The wait ends as soon as they agree and only bounds a
// failure: a loaded host stalls the guest's ticks (issue 9).
const (
	statsWait = 2 * time.Minute
	statsPoll = 250 * time.Millisecond
)

func TestVirtualServiceSplit(t *testing.T) {
	requireGuest(t)
	client, err := ipvs.New()
	if err != nil {
		t.Fatalf("ipvs client: %v", err)
	}

	tests := []struct {
		name      string
		vip       string
		network   string // tcp or udp
		scheduler string
		weights   []uint32 // per backend be1..be3
		from      *Namespace
		requests  int
		want      map[string]int
	}{
		{
			name: "rr tcp from client namespace", vip: "10.96.0.10", network: "tcp", scheduler: "rr",
			weights: []uint32{1, 1, 1}, from: topo.Client, requests: 60,
			want: map[string]int{"be1": 20, "be2": 20, "be3": 20},
		},
		{
			name: "rr tcp from node (hostNetwork)", vip: "10.96.0.11", network: "tcp", scheduler: "rr",
			weights: []uint32{1, 1, 1}, from: Root, requests: 30,
			want: map[string]int{"be1": 10, "be2": 10, "be3": 10},
		},
		{
			name: "wrr 1/2/3", vip: "10.96.0.12", network: "tcp", scheduler: "wrr",
			weights: []uint32{1, 2, 3}, from: topo.Client, requests: 60,
			want: map[string]int{"be1": 10, "be2": 20, "be3": 30},
		},
		{
			name: "wrr weight 0 quiesces a backend", vip: "10.96.0.13", network: "tcp", scheduler: "wrr",
			weights: []uint32{1, 2, 0}, from: topo.Client, requests: 30,
			want: map[string]int{"be1": 10, "be2": 20},
		},
		{
			name: "rr udp", vip: "10.96.0.14", network: "udp", scheduler: "rr",
			weights: []uint32{1, 1, 1}, from: topo.Client, requests: 30,
			want: map[string]int{"be1": 10, "be2": 10, "be3": 10},
		},
		{
			name: "rr tcp ipv6", vip: "fd00:96::10", network: "tcp", scheduler: "rr",
			weights: []uint32{1, 1, 1}, from: topo.Client, requests: 30,
			want: map[string]int{"be1": 10, "be2": 10, "be3": 10},
		},
		{
			name: "wrr udp ipv6", vip: "fd00:96::11", network: "udp", scheduler: "wrr",
			weights: []uint32{3, 0, 1}, from: topo.Client, requests: 40,
			want: map[string]int{"be1": 30, "be3": 10},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Each case has its own VIP and the client ports are unique per
			// binary, so the cases overlap their waits for the counters.
			t.Parallel()
			vip := netip.MustParseAddr(tc.vip)
			port := uint16(80)
			if tc.network == "udp" {
				port = 53
			}
			svc := createService(t, client, vip, port, tc.network, tc.scheduler, tc.weights)

			got, err := Split(t.Context(), tc.from, tc.network, netip.AddrPortFrom(vip, port), tc.requests)
			if err != nil {
				t.Fatalf("traffic: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("answers per backend (-want +got):\n%s", diff)
			}
			// The kernel's own per-destination counters must agree with what
			// the client saw. IPVS folds its per-CPU counters into the ones
			// it reports on its 2-second estimator tick, so poll for them.
			var kernel map[string]int
			deadline := time.Now().Add(statsWait)
			for {
				kernel = kernelConnections(t, client, svc)
				if cmp.Equal(tc.want, kernel) || time.Now().After(deadline) {
					break
				}
				time.Sleep(statsPoll)
			}
			if diff := cmp.Diff(tc.want, kernel); diff != "" {
				t.Errorf("IPVS destination connection counters after %s (-want +got):\n%s", statsWait, diff)
			}
		})
	}
}

// createService binds vip to switchyard0 and creates a NAT virtual service
// on it with one real server per backend (weight per backend), removing
// both when the test ends.
func createService(t *testing.T, c ipvs.Client, vip netip.Addr, port uint16, network, scheduler string, weights []uint32) ipvs.Service {
	t.Helper()
	if err := topo.AddVIP(vip); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := topo.DelVIP(vip); err != nil {
			t.Error(err)
		}
	})
	svc := ipvs.Service{
		Address:   vip,
		Port:      port,
		Scheduler: scheduler,
		Family:    ipvs.INET,
		Protocol:  ipvs.TCP,
		Netmask:   netmask.MaskFrom(32, 32), // always set (kernel-lab.md pitfall 13)
	}
	if vip.Is6() {
		svc.Family = ipvs.INET6
		svc.Netmask = netmask.MaskFrom(128, 128)
	}
	if network == "udp" {
		svc.Protocol = ipvs.UDP
	}
	if err := c.CreateService(svc); err != nil {
		t.Fatalf("create service %s: %v", vip, err)
	}
	t.Cleanup(func() {
		if err := c.RemoveService(svc); err != nil {
			t.Errorf("remove service %s: %v", vip, err)
		}
	})
	for i, w := range weights {
		be := topo.Backends[i]
		addr := be.IPv4
		if vip.Is6() {
			addr = be.IPv6
		}
		backendPort := uint16(HTTPPort)
		if network == "udp" {
			backendPort = UDPPort
		}
		dst := ipvs.Destination{
			Address:   addr,
			Port:      backendPort,
			Family:    svc.Family,
			FwdMethod: ipvs.Masquerade,
			Weight:    w,
		}
		if err := c.CreateDestination(svc, dst); err != nil {
			t.Fatalf("create destination %s for %s: %v", addr, vip, err)
		}
	}
	return svc
}

// kernelConnections maps backend names to the connection counter IPVS keeps
// for their real servers, leaving out real servers that saw none.
func kernelConnections(t *testing.T, c ipvs.Client, svc ipvs.Service) map[string]int {
	t.Helper()
	dsts, err := c.Destinations(svc)
	if err != nil {
		t.Fatalf("list destinations of %s: %v", svc.Address, err)
	}
	names := map[netip.Addr]string{}
	for _, be := range topo.Backends {
		names[be.IPv4] = be.Name
		names[be.IPv6] = be.Name
	}
	got := map[string]int{}
	for _, d := range dsts {
		name, ok := names[d.Address]
		if !ok {
			name = fmt.Sprintf("unknown %s", d.Address)
		}
		if d.Stats64.Connections > 0 {
			got[name] = int(d.Stats64.Connections)
		}
	}
	return got
}
