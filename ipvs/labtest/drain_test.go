//go:build linux

package labtest

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/cloudflare/ipvs"
	"github.com/google/go-cmp/cmp"
)

// TestDrainKeepsEstablishedConnections checks the kernel behaviour graceful
// termination rests on: a real server at weight 0 gets no new connections
// but keeps serving its established ones; a real server removed from the
// service has the packets of its established connections silently dropped
// (with expire_nodest_conn=0, the default), so the dataplane may only
// delete it once its connections are gone.
func TestDrainKeepsEstablishedConnections(t *testing.T) {
	requireGuest(t)
	t.Parallel()
	// The dataplane sets expire_nodest_conn=1 (then the removed server's
	// connection is reset at once); this test pins the kernel default 0.
	const nodest = "/proc/sys/net/ipv4/vs/expire_nodest_conn"
	old, err := os.ReadFile(nodest)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(nodest, []byte("0"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.WriteFile(nodest, old, 0o644) })
	client, err := ipvs.New()
	if err != nil {
		t.Fatalf("ipvs client: %v", err)
	}
	vip := netip.MustParseAddr("10.96.0.20")
	target := netip.AddrPortFrom(vip, 80)
	svc := createService(t, client, vip, 80, "tcp", "rr", []uint32{1, 1, 1})

	conn, first := dialFirst(t, target)
	var drained ipvs.Destination
	for _, be := range topo.Backends {
		if be.Name == first {
			drained = ipvs.Destination{Address: be.IPv4, Port: HTTPPort, Family: ipvs.INET, FwdMethod: ipvs.Masquerade}
		}
	}
	if !drained.Address.IsValid() {
		t.Fatalf("answer from unknown backend %q", first)
	}

	// Weight 0: new connections avoid it, the established one stays.
	if err := client.UpdateDestination(svc, drained); err != nil {
		t.Fatalf("drain %s: %v", first, err)
	}
	got, err := Split(t.Context(), topo.Client, "tcp", target, 20)
	if err != nil {
		t.Fatal(err)
	}
	others := names(first)
	if diff := cmp.Diff(map[string]int{others[0]: 10, others[1]: 10}, got); diff != "" {
		t.Errorf("new connections after draining %s (-want +got):\n%s", first, diff)
	}
	if again, err := conn.Get(); err != nil || again != first {
		t.Errorf("established connection after draining: answer %q, %v; want %q", again, err, first)
	}

	// Removed from the service: IPVS drops the established connection's
	// packets, so the request times out.
	if err := client.RemoveDestination(svc, drained); err != nil {
		t.Fatalf("remove %s: %v", first, err)
	}
	conn.Timeout = 2 * time.Second
	var netErr net.Error
	if again, err := conn.Get(); !errors.As(err, &netErr) || !netErr.Timeout() {
		t.Errorf("established connection after removing its real server: answer %q, %v; want a timeout (IPVS drops it)", again, err)
	}
	got, err = Split(t.Context(), topo.Client, "tcp", target, 10)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int{others[0]: 5, others[1]: 5}, got); diff != "" {
		t.Errorf("new connections after removing %s (-want +got):\n%s", first, diff)
	}
}

// names returns the names of the backends other than name.
func names(except string) []string {
	var out []string
	for _, be := range topo.Backends {
		if be.Name != except {
			out = append(out, be.Name)
		}
	}
	return out
}
