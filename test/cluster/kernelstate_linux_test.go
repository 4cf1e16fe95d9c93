package cluster

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestServiceKernelAgainstKernel: what the soak compares a node's kernel
// with (Service.ServiceKernel of the API's endpoints, several Services
// merged) and how the kernel's side is taken (Only, then
// WithoutWeights), for a kernel that holds exactly that, one with a
// stale real server, one with a real server draining, and one with a
// Service missing.
func TestServiceKernelAgainstKernel(t *testing.T) {
	a := &Service{ClusterIP: netip.MustParseAddr("10.96.0.10"), Ports: map[string]uint16{PortHTTP: 80, PortTCP: 9000, PortUDP: 9000}}
	b := &Service{ClusterIP: netip.MustParseAddr("10.96.0.11"), Ports: map[string]uint16{PortHTTP: 80, PortTCP: 9000, PortUDP: 9000}}
	p1 := &Pod{Addr: netip.MustParseAddr("10.244.1.10")}
	p2 := &Pod{Addr: netip.MustParseAddr("10.244.2.10")}
	want := a.ServiceKernel([]Endpoint{{Pod: p2}, {Pod: p1}}).Merge(b.ServiceKernel([]Endpoint{{Pod: p1}}))
	other := netip.MustParseAddr("10.96.0.99") // not the soak's: left out by Only
	exact := KernelState{
		Services: map[string][]string{
			"TCP 10.96.0.10:80":   {"10.244.1.10:8080 w1", "10.244.2.10:8080 w1"},
			"TCP 10.96.0.10:9000": {"10.244.1.10:9000 w1", "10.244.2.10:9000 w1"},
			"UDP 10.96.0.10:9000": {"10.244.1.10:9000 w1", "10.244.2.10:9000 w1"},
			"TCP 10.96.0.11:80":   {"10.244.1.10:8080 w1"},
			"TCP 10.96.0.11:9000": {"10.244.1.10:9000 w1"},
			"UDP 10.96.0.11:9000": {"10.244.1.10:9000 w1"},
			"TCP 10.96.0.99:80":   {"10.244.3.10:8080 w0"},
		},
		Addrs:      []netip.Addr{a.ClusterIP, b.ClusterIP, other},
		ClusterIPs: []netip.Addr{a.ClusterIP, b.ClusterIP, other},
	}
	with := func(key string, ds ...string) KernelState {
		k := KernelState{Services: map[string][]string{}, Addrs: exact.Addrs, ClusterIPs: exact.ClusterIPs}
		for kk, v := range exact.Services {
			k.Services[kk] = v
		}
		if ds == nil {
			delete(k.Services, key)
		} else {
			k.Services[key] = ds
		}
		return k
	}
	ours := map[netip.Addr]bool{a.ClusterIP: true, b.ClusterIP: true}
	for _, tc := range []struct {
		name     string
		kernel   KernelState
		draining bool // WithoutWeights fails
		same     bool // equal to want
	}{
		{"exact", exact, false, true},
		{"stale real server", with("TCP 10.96.0.11:80", "10.244.1.10:8080 w1", "10.244.3.10:8080 w1"), false, false},
		{"real server draining", with("TCP 10.96.0.11:80", "10.244.1.10:8080 w1", "10.244.3.10:8080 w0"), true, false},
		{"Service missing", with("UDP 10.96.0.11:9000"), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.kernel.Only(ours).WithoutWeights()
			if (err != nil) != tc.draining {
				t.Fatalf("WithoutWeights: %v, want an error %v", err, tc.draining)
			}
			if tc.draining {
				return
			}
			d := cmp.Diff(want, got, cmpopts.EquateComparable(netip.Addr{}))
			if (d == "") != tc.same {
				t.Errorf("same as the API's: %v, want %v (-API +kernel):\n%s", d == "", tc.same, d)
			}
		})
	}
}
