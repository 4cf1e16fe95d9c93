//go:build linux

package labtest

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	cipvs "github.com/cloudflare/ipvs"
	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/test/netns"
)

// TestDataplaneSetsTimeouts configures IPVS connection timeouts in a
// Dataplane: after its first Apply the kernel reports them (what
// `ipvsadm -L --timeout` prints, read with a client of its own), the zero
// one left at the kernel's value, and a new UDP flow's IPVS connection
// expires within the configured UDP timeout, not the kernel's 300 s.
func TestDataplaneSetsTimeouts(t *testing.T) {
	requireGuest(t)
	clearPlan(t)
	c, err := cipvs.New()
	if err != nil {
		t.Fatal(err)
	}
	orig, err := c.Config()
	if err != nil {
		t.Fatalf("read timeouts: %v", err)
	}
	t.Cleanup(func() {
		if err := c.SetConfig(orig); err != nil {
			t.Errorf("restore timeouts %+v: %v", orig, err)
		}
	})
	if orig.UDPTimeout <= 45 {
		t.Fatalf("the kernel's UDP timeout is %ds already: the test cannot tell", orig.UDPTimeout)
	}
	dp := newLabDataplane(t, func(cfg *ipvs.Config) {
		cfg.Timeouts = ipvs.Timeouts{TCP: 2 * time.Hour, UDP: 45 * time.Second}
	})
	target := netip.MustParseAddrPort("10.96.1.50:53")
	plan := planOf(map[string]model.VirtualService{
		"dns": clusterIP(target.Addr().String(), target.Port(), model.UDP, "rr", backends(false, UDPPort, 1, 1, 1)),
	})
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatal(err)
	}
	got, err := c.Config()
	if err != nil {
		t.Fatalf("read timeouts: %v", err)
	}
	want := cipvs.Config{TCPTimeout: 7200, TCPFinTimeout: orig.TCPFinTimeout, UDPTimeout: 45}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("kernel timeouts, seconds (-want +got):\n%s", diff)
	}

	port, err := netns.NextSourcePort()
	if err != nil {
		t.Fatal(err)
	}
	if err := topo.Client.Do(func() error {
		_, err := udpAsk(t.Context(), port, target)
		return err
	}); err != nil {
		t.Fatalf("udp flow: %v", err)
	}
	expires, err := ipvsConnExpiry(target)
	if err != nil {
		t.Fatal(err)
	}
	if len(expires) == 0 {
		t.Fatalf("no IPVS connection to %s", target)
	}
	for _, e := range expires {
		if e <= 0 || e > 45 {
			t.Errorf("IPVS connection to %s expires in %ds, want within the 45s UDP timeout", target, e)
		}
	}
}

// ipvsConnExpiry returns the seconds left of each IPVS connection to
// target, from the node's /proc/net/ip_vs_conn. It reads the calling
// thread's namespace (kernel-lab.md pitfall 5), so it locks the goroutine
// to a thread of the node's.
func ipvsConnExpiry(target netip.AddrPort) ([]int, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	f, err := os.Open("/proc/thread-self/net/ip_vs_conn")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// Pro FromIP FPrt ToIP TPrt DestIP DPrt State Expires ...; IPv4
	// addresses and ports in hex.
	a4 := target.Addr().As4()
	toIP := fmt.Sprintf("%02X%02X%02X%02X", a4[0], a4[1], a4[2], a4[3])
	toPort := fmt.Sprintf("%04X", target.Port())
	var out []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 9 || fields[0] != "UDP" || fields[3] != toIP || fields[4] != toPort {
			continue
		}
		e, err := strconv.Atoi(fields[8])
		if err != nil {
			return nil, fmt.Errorf("ip_vs_conn line %q: %w", sc.Text(), err)
		}
		out = append(out, e)
	}
	return out, sc.Err()
}
