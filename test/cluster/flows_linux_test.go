package cluster_test

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-lb/switchyard/test/cluster"
)

// envRollingFlows is how many long-lived flows each rolling restart
// suite keeps open (TestRollingRestart, TestLoadBalancerBGPRollingRestart,
// TestLoadBalancerLayer2RollingRestart); default defaultRollingFlows.
// `make bench-cluster` runs them with 1,000 (issue 13's done-when).
const (
	envRollingFlows     = "CLUSTER_ROLLING_FLOWS"
	defaultRollingFlows = 100
)

// rollingFlows returns the rolling suites' flow count, after checking
// that the guest can hold them (guestCapacity).
func rollingFlows(t *testing.T) int {
	t.Helper()
	n := envCount(t, envRollingFlows, defaultRollingFlows)
	guestCapacity(t, n)
	return n
}

// flowInterval is the time between two exchanges of one flow: a second
// up to 100 flows, then longer, so that the flows together make about 100
// exchanges a second whatever their number (the guest is one emulated
// CPU; 1,000 exchanges a second would measure its saturation, not
// restarts).
func flowInterval(flows int) time.Duration {
	return max(time.Second, time.Duration(flows)*10*time.Millisecond)
}

// rollingLoad is the traffic of a rolling restart suite: long-lived
// flows and a request every 100 ms from the client to a LoadBalancer IP.
type rollingLoad struct {
	tr   *cluster.Traffic
	reqs *requests
	// interval is the flows' (flowInterval); healthy are the flows
	// established and unbroken 2 s after they started, when the
	// restarts begin.
	interval time.Duration
	healthy  map[netip.AddrPort]bool
}

// startRollingLoad starts flows flows and the requests to svc's
// LoadBalancer IP, and waits 2 s for the flows healthy then.
func startRollingLoad(t *testing.T, c *cluster.Cluster, svc *cluster.Service, flows int) *rollingLoad {
	t.Helper()
	l := &rollingLoad{interval: flowInterval(flows), healthy: map[netip.AddrPort]bool{}}
	var err error
	l.tr, err = cluster.StartTraffic(t.Context(), c.Client, cluster.TrafficSpec{
		Network: "tcp", Target: svc.LoadBalancerAddr(cluster.PortTCP), Flows: flows, Interval: l.interval, Timeout: stallTimeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	l.reqs = startRequests(t.Context(), 100*time.Millisecond, []target{{c.Client, svc.LoadBalancerAddr(cluster.PortHTTP)}})
	time.Sleep(2 * time.Second)
	before := l.tr.Report()
	for _, f := range before.Flows {
		if f.Break == nil && !f.Established.IsZero() {
			l.healthy[f.Local] = true
		}
	}
	if len(l.healthy) < len(before.Flows) {
		t.Logf("before the restarts, %d of %d flows were not healthy (never established, or reset with nothing changing): %s",
			len(before.Flows)-len(l.healthy), len(before.Flows), before)
	}
	if avail, err := memAvailableMiB(); err == nil {
		t.Logf("with %d flows open (one exchange each every %s), the guest has %d MiB available", flows, l.interval, avail)
	}
	return l
}

// guestCapacity checks, and raises where it can, what flows long-lived
// flows need in the guest: this process holds both ends of each (the
// client and the pods' servers run here), so file descriptors for about
// four per flow; the nodes' and router's conntrack tables an entry or
// two per flow each, against the kernel's one nf_conntrack_max; and
// memory. It logs what it found.
func guestCapacity(t *testing.T, flows int) {
	t.Helper()
	need := uint64(4*flows + 1024)
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatalf("RLIMIT_NOFILE: %v", err)
	}
	if lim.Cur < need {
		raised := syscall.Rlimit{Cur: need, Max: max(lim.Max, need)}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err != nil {
			t.Fatalf("%d flows need %d file descriptors; RLIMIT_NOFILE is %d (hard %d) and raising it failed: %v", flows, need, lim.Cur, lim.Max, err)
		}
		t.Logf("RLIMIT_NOFILE raised from %d (hard %d) to %d for %d flows", lim.Cur, lim.Max, need, flows)
		lim = raised
	}
	ctMax, err := readInt("/proc/sys/net/netfilter/nf_conntrack_max")
	if err != nil {
		t.Fatalf("conntrack: %v", err)
	}
	if ctMax < 8*flows {
		t.Fatalf("%d flows need about %d conntrack entries over the lab's namespaces; nf_conntrack_max is %d (give the guest more memory: CLUSTER_MEM)", flows, 8*flows, ctMax)
	}
	avail, err := memAvailableMiB()
	if err != nil {
		t.Fatalf("memory: %v", err)
	}
	// A rough bound of 100 KiB a flow (both sockets, their goroutines,
	// conntrack and IPVS entries): 1,000 flows took about 80 MiB of the
	// guest's 1.1 GiB available (the suites log MemAvailable with their
	// flows open).
	if want := flows/10 + 64; avail < want {
		t.Fatalf("%d flows want about %d MiB free in the guest; %d MiB available (CLUSTER_MEM)", flows, want, avail)
	}
	t.Logf("guest capacity for %d flows: RLIMIT_NOFILE %d, nf_conntrack_max %d, MemAvailable %d MiB", flows, lim.Cur, ctMax, avail)
}

func readInt(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// memAvailableMiB is /proc/meminfo's MemAvailable in MiB.
func memAvailableMiB() (int, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			if err != nil {
				return 0, fmt.Errorf("/proc/meminfo: %q: %w", sc.Text(), err)
			}
			return kb / 1024, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("/proc/meminfo: no MemAvailable")
}
