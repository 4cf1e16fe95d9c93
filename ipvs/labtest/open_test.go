//go:build linux

package labtest

import (
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/core/runner/runnertest"
	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/test/harness"
	"github.com/switchyard-lb/switchyard/test/netns"
)

// holdSCTP opens an SCTP association from namespace from to target and
// returns the answering backend's name and a function that ends it (once,
// however often it is called). The backends end an association
// themselves only after answerTimeout.
func holdSCTP(from *Namespace, target netip.AddrPort) (string, func(), error) {
	var (
		fd   int
		name string
	)
	err := from.Do(func() error {
		port, err := netns.NextSourcePort()
		if err != nil {
			return err
		}
		fd, name, err = connectSCTP(port, target)
		return err
	})
	if err != nil {
		return "", nil, err
	}
	var once sync.Once
	return name, func() {
		once.Do(func() {
			unix.Shutdown(fd, unix.SHUT_WR)
			unix.Close(fd)
		})
	}, nil
}

// without returns the weights 1/1/1 with the backend named name left out.
func without(name string) []int {
	w := []int{1, 1, 1}
	for i, be := range topo.Backends {
		if be.Name == name {
			w[i] = -1
		}
	}
	return w
}

// drainWait bounds the wait for the drain goroutine (a pass every
// ipvs.DrainInterval) to delete a real server: a failure bound, generous
// because a loaded host stalls the guest for many seconds.
const drainWait = 2 * time.Minute

// TestOpenDrainsRemovedRealServers runs a Dataplane from ipvs.Open, whose
// own goroutine deletes drained real servers every ipvs.DrainInterval:
// the backends of an open TCP connection and of an open SCTP association
// are removed from the plan and stay in IPVS at weight 0; once the
// association ends, the goroutine deletes the SCTP real server (SCTP waits
// for active associations only) while the TCP one, whose connection is
// still open and still served, stays; once the drain timeout passes, the
// TCP real server is deleted too. Only the test's clock moves.
func TestOpenDrainsRemovedRealServers(t *testing.T) {
	requireGuest(t)
	if !topo.SCTP {
		t.Fatal("the guest kernel has no SCTP sockets: is sctp in test/lab's module list?")
	}
	clearPlan(t)
	deleteTable(t)
	clock := runnertest.NewClock(time.Now())
	dp, err := ipvs.Open(ipvs.Config{StrictARP: true, DrainTimeout: time.Hour, Now: clock.Now,
		Local: ipvs.LocalDetector{CIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/24")}}})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := dp.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	web := netip.MustParseAddrPort("10.96.8.10:80")
	assoc := netip.AddrPortFrom(netip.MustParseAddr("10.96.8.11"), SCTPPort)
	plan := planOf(map[string]model.VirtualService{
		"web":   clusterIP("10.96.8.10", 80, model.TCP, "rr", backends(false, HTTPPort, 1, 1, 1)),
		"assoc": clusterIP("10.96.8.11", SCTPPort, model.SCTP, "rr", backends(false, SCTPPort, 1, 1, 1)),
	})
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	conn, err := DialHTTP(t.Context(), topo.Client, web)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	webBE, err := conn.Get()
	if err != nil {
		t.Fatal(err)
	}
	sctpBE, endAssoc, err := holdSCTP(topo.Client, assoc)
	if err != nil {
		t.Fatal(err)
	}
	defer endAssoc()

	plan.Services[svcKey("web")].VirtualServices[0].Destinations = backends(false, HTTPPort, without(webBE)...)
	plan.Services[svcKey("assoc")].VirtualServices[0].Destinations = backends(false, SCTPPort, without(sctpBE)...)
	if err := dp.Apply(t.Context(), plugin.Update{Plan: plan, Changed: []model.ServiceKey{svcKey("web"), svcKey("assoc")}}); err != nil {
		t.Fatalf("Apply without %s and %s: %v", webBE, sctpBE, err)
	}
	// dests is the table's real servers: weight 1 for those in w, 0 for
	// the draining one (left out of w), absent when gone.
	dests := func(port uint16, w []int, draining bool) []ipvs.Destination {
		var out []ipvs.Destination
		for i, be := range topo.Backends {
			d := ipvs.Destination{DestinationKey: ipvs.DestinationKey{Addr: be.IPv4, Port: port}, Weight: 1}
			if w[i] < 0 {
				if !draining {
					continue
				}
				d.Weight = 0
			}
			out = append(out, d)
		}
		return out
	}
	table := func(webDraining, sctpDraining bool) map[string][]ipvs.Destination {
		return map[string][]ipvs.Destination{
			"TCP/10.96.8.10:80 rr flags=0x0 persist=0s":    dests(HTTPPort, without(webBE), webDraining),
			"SCTP/10.96.8.11:9132 rr flags=0x0 persist=0s": dests(SCTPPort, without(sctpBE), sctpDraining),
		}
	}
	ours := func() map[string][]ipvs.Destination {
		all, _ := kernelDump(t)
		out := map[string][]ipvs.Destination{}
		for name, ds := range all {
			if _, ok := table(false, false)[name]; ok {
				out[name] = ds
			}
		}
		return out
	}
	if diff := cmp.Diff(table(true, true), ours(), cmpLab); diff != "" {
		t.Fatalf("IPVS table after removing %s (TCP) and %s (SCTP) (-want +got):\n%s", webBE, sctpBE, diff)
	}
	if n := dp.Draining(); n != 2 {
		t.Errorf("draining real servers = %d, want 2", n)
	}

	endAssoc()
	harness.Poll(t, drainWait, harness.Cond("the ended association's real server deleted", func() bool {
		return cmp.Equal(table(true, false), ours(), cmpLab)
	}))
	if again, err := conn.Get(); err != nil || again != webBE {
		t.Errorf("established connection while its real server drains: answer %q, %v; want %q", again, err, webBE)
	}
	if n := dp.Draining(); n != 1 {
		t.Errorf("draining real servers after the association ended = %d, want 1 (the TCP one)", n)
	}

	conn.Close()
	clock.Step(time.Hour)
	harness.Poll(t, drainWait, harness.Cond("the TCP real server deleted after the drain timeout", func() bool {
		return cmp.Equal(table(false, false), ours(), cmpLab)
	}))
	if n := dp.Draining(); n != 0 {
		t.Errorf("draining real servers at the end = %d, want 0", n)
	}
	others := names(webBE)
	got, err := Split(t.Context(), topo.Client, "tcp", web, 10)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int{others[0]: 5, others[1]: 5}, got); diff != "" {
		t.Errorf("connections after the drain (-want +got):\n%s", diff)
	}
}
