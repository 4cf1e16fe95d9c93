//go:build peers

package bgp

// Tests against real routers, FRR (zebra + bgpd) and BIRD 2, each in its
// own network namespace on a bridge with two node namespaces. They need
// root, ip(8), FRR and BIRD; they skip otherwise. The speaker runs in a
// child process inside a node namespace (the test binary re-executed with
// -bgp-helper): GoBGP dials from its own goroutines, so it cannot be moved
// into a namespace from inside this process.
//
// Run: go test -tags peers -run '^TestPeers' ./announcers/bgp/

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/test/harness"
	"github.com/switchyard-lb/switchyard/test/netns"
	"github.com/switchyard-lb/switchyard/test/netns/routers"
)

var helperFlag = flag.String("bgp-helper", "", "internal: run a BGP speaker with this JSON helperConfig instead of the tests")

func TestMain(m *testing.M) {
	flag.Parse()
	if *helperFlag != "" {
		os.Exit(runHelper(*helperFlag))
	}
	os.Exit(m.Run())
}

// helperConfig is what the parent test passes to a speaker process.
type helperConfig struct {
	RouterID netip.Addr
	Peers    []netip.Addr
	PeerASNs []uint32
	Announce []string
	// AtStart announces at once; otherwise SIGUSR1 announces and SIGUSR2
	// withdraws. SIGTERM closes the speaker and exits; SIGHUP closes it
	// for a restart (CloseForRestart) and exits.
	AtStart bool
	// RestartTime, when non-zero, enables graceful restart.
	RestartTime time.Duration
	// HoldTime is the peers' hold time; default 3 s.
	HoldTime time.Duration
	// BFD, when set, runs BFD with every peer.
	BFD *BFD
}

func runHelper(js string) int {
	var hc helperConfig
	if err := json.Unmarshal([]byte(js), &hc); err != nil {
		fmt.Fprintln(os.Stderr, "bad helper config:", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg := Config{LocalASN: 64512, RouterID: hc.RouterID,
		GracefulRestart: GracefulRestart{Enabled: hc.RestartTime > 0, RestartTime: hc.RestartTime}}
	hold := cmp.Or(hc.HoldTime, 3*time.Second)
	for i, p := range hc.Peers {
		cfg.Peers = append(cfg.Peers, Peer{Address: p, ASN: hc.PeerASNs[i], HoldTime: hold, KeepaliveTime: hold / 3, ConnectRetry: time.Second, BFD: hc.BFD})
	}
	set := make([]model.Announcement, 0, len(hc.Announce))
	for _, a := range hc.Announce {
		set = append(set, model.Announcement{Addr: netip.MustParseAddr(a), Service: model.ServiceKey{Namespace: "ns", Name: "svc"}})
	}
	ctx := context.Background()
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGTERM, syscall.SIGHUP)
	s, err := New(ctx, cfg, log)
	if err != nil {
		log.Error("starting speaker", "err", err)
		return 1
	}
	do := func(set []model.Announcement) {
		if err := s.Announce(ctx, set); err != nil {
			log.Error("announce", "err", err)
		}
		log.Info("announced", "set", len(set))
	}
	if hc.AtStart {
		do(set)
	}
	for x := range sig {
		switch x {
		case syscall.SIGUSR1:
			do(set)
		case syscall.SIGUSR2:
			do(nil)
		case syscall.SIGTERM:
			if err := s.Close(); err != nil {
				log.Error("close", "err", err)
				return 1
			}
			return 0
		case syscall.SIGHUP:
			if err := s.CloseForRestart(); err != nil {
				log.Error("close for restart", "err", err)
				return 1
			}
			return 0
		}
	}
	return 0
}

const vip = "10.96.100.1"

// lab is one bridge with FRR (10.0.0.1, AS 64513), BIRD (10.0.0.2, AS
// 64514) and two nodes (10.0.0.11 and .12, AS 64512).
type lab struct {
	frr, bird, a, b *netns.NS
	frrDir, birdDir string
	f               *routers.FRR
}

func requireBinaries(t *testing.T) {
	t.Helper()
	for _, p := range []string{"/usr/lib/frr/zebra", "/usr/lib/frr/bgpd", "/usr/bin/vtysh", "/usr/sbin/bird", "/usr/sbin/birdc"} {
		if _, err := os.Stat(p); err != nil {
			if netns.Required() {
				t.Fatalf("peer tests need FRR and BIRD 2 (apt-get install frr bird2): %v", err)
			}
			t.Skipf("peer tests need FRR and BIRD 2 (apt-get install frr bird2): %v", err)
		}
	}
}

func newLab(t *testing.T) *lab {
	t.Helper()
	return newLabFRR(t, labPeering("10.0.0.1", 64513, netip.MustParseAddr("fd00::11")))
}

// newLabFRR is newLab with FRR peering as frr says.
func newLabFRR(t *testing.T, frr routers.Peering) *lab {
	t.Helper()
	netns.Require(t)
	requireBinaries(t)
	sw := netns.NewBridge(t, "sw")
	l := &lab{frr: netns.New(t, "rfrr"), bird: netns.New(t, "rbird"), a: netns.New(t, "nodea"), b: netns.New(t, "nodeb")}
	for i, n := range []struct {
		ns          *netns.NS
		addr, addr6 string
	}{{l.frr, "10.0.0.1/24", "fd00::1/64"}, {l.bird, "10.0.0.2/24", "fd00::2/64"}, {l.a, "10.0.0.11/24", "fd00::11/64"}, {l.b, "10.0.0.12/24", "fd00::12/64"}} {
		mac := net.HardwareAddr{2, 0, 0, 0, 0, byte(i + 1)}
		sw.Attach(t, n.ns, "eth0", mac, netip.MustParsePrefix(n.addr), netip.MustParsePrefix(n.addr6))
	}
	l.f = routers.StartFRR(t, l.frr, frr.FRRConf())
	l.frrDir = l.f.Dir
	l.startBIRD(t)
	return l
}

// labPeering is how both routers of the lab peer with the nodes: FRR
// with both over IPv4 and with node A over IPv6 too, BIRD over IPv4,
// short timers (keepalive 1 s, hold 3 s), ECMP.
func labPeering(routerID string, asn uint32, nodes6 ...netip.Addr) routers.Peering {
	return routers.Peering{
		RouterID: netip.MustParseAddr(routerID), ASN: asn, NodeASN: 64512,
		Nodes:  []netip.Addr{netip.MustParseAddr("10.0.0.11"), netip.MustParseAddr("10.0.0.12")},
		Nodes6: nodes6, Keepalive: 1, Hold: 3, Multipath: true,
	}
}

func (l *lab) startBIRD(t *testing.T) {
	t.Helper()
	l.birdDir = routers.StartBIRD(t, l.bird, labPeering("10.0.0.2", 64514).BIRDConf()).Dir
}

// speaker starts a node's speaker process peering with both routers.
func (l *lab) speaker(t *testing.T, n *netns.NS, routerID string, atStart bool) *exec.Cmd {
	t.Helper()
	return l.speakerGR(t, n, routerID, atStart, 0)
}

func (l *lab) speakerGR(t *testing.T, n *netns.NS, routerID string, atStart bool, restart time.Duration) *exec.Cmd {
	t.Helper()
	return startHelper(t, n, helperConfig{
		RestartTime: restart,
		RouterID:    netip.MustParseAddr(routerID),
		Peers:       []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")},
		PeerASNs:    []uint32{64513, 64514},
		Announce:    []string{vip},
		AtStart:     atStart,
	})
}

// startHelper runs a speaker process with hc inside n.
func startHelper(t *testing.T, n *netns.NS, hc helperConfig) *exec.Cmd {
	t.Helper()
	js, err := json.Marshal(hc)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"-bgp-helper=" + string(js)}
	if hc.BFD != nil {
		// A node that runs BFD at 300 ms x 3 keeps CPU for the daemon (a
		// Guaranteed pod with its own cores): nice -10 stands for that
		// here, against the load of the other suites on the same cores.
		return n.Start(t, "nice", append([]string{"-n", bfdNice, exe}, args...)...)
	}
	return n.Start(t, exe, args...)
}

// bfdNice is the niceness of a speaker or daemon that runs BFD in the
// peer suites: at load ~40 on 2 cores an unprioritised speaker missed
// its 900 ms detection time so often that no session held 2 s in 3 min.
const bfdNice = "-10"

// frrRIB returns the next hops FRR's BGP table holds for the VIP.
func (l *lab) frrRIB(t *testing.T) []string {
	t.Helper()
	hops, _ := l.frrPaths(t, vip+"/32")
	return hops
}

// frrPaths returns the VIP's next hops in FRR's BGP table and how many of
// its paths are marked stale (graceful restart).
func (l *lab) frrPaths(t *testing.T, prefix string) (hops []string, stale int) {
	t.Helper()
	return frrPaths(t, l.f, prefix)
}

// frrPaths returns prefix's next hops in f's BGP table and how many of
// its paths are marked stale (graceful restart).
func frrPaths(t *testing.T, f *routers.FRR, prefix string) (hops []string, stale int) {
	t.Helper()
	afi := "ipv4"
	if netip.MustParsePrefix(prefix).Addr().Is6() {
		afi = "ipv6"
	}
	out, err := f.Vtysh("show bgp " + afi + " unicast json")
	if err != nil {
		t.Fatalf("reading FRR's BGP table: %v", err)
	}
	var rib struct {
		Routes map[string][]struct {
			Stale    bool `json:"stale"`
			Nexthops []struct {
				IP string `json:"ip"`
			} `json:"nexthops"`
		} `json:"routes"`
	}
	if err := json.Unmarshal([]byte(out), &rib); err != nil {
		t.Fatalf("decoding FRR's BGP table %q: %v", out, err)
	}
	for _, p := range rib.Routes[prefix] {
		if p.Stale {
			stale++
		}
		for _, h := range p.Nexthops {
			hops = append(hops, h.IP)
		}
	}
	slices.Sort(hops)
	return hops, stale
}

// birdRIB returns the next hops BIRD's table holds for the VIP.
func (l *lab) birdRIB(t *testing.T) []string {
	t.Helper()
	// Only the nodes' BGP routes are in BIRD's table (the kernel protocol
	// imports none), so every "via" is a next hop of the VIP.
	out, err := l.bird.Exec("birdc", "-s", l.birdDir+"/bird.ctl", "show", "route")
	if err != nil {
		t.Fatalf("reading BIRD's table: %v", err)
	}
	var hops []string
	for _, f := range strings.Split(out, "\n") {
		fs := strings.Fields(f)
		if i := slices.Index(fs, "via"); i >= 0 && i+1 < len(fs) {
			hops = append(hops, fs[i+1])
		}
	}
	slices.Sort(hops)
	return slices.Compact(hops)
}

// fib returns a function that reads, over a netlink socket opened inside
// n, the next hops n's kernel uses for the VIP: ~1 ms per poll, against
// ~100 ms for vtysh.
func fib(t *testing.T, n *netns.NS) func(*testing.T) []string {
	t.Helper()
	return fibFor(t, n, netip.MustParsePrefix(vip+"/32"))
}

// fibFor is fib for any prefix.
func fibFor(t *testing.T, n *netns.NS, prefix netip.Prefix) func(*testing.T) []string {
	t.Helper()
	read := n.FIB(t, prefix)
	return func(t *testing.T) []string {
		hops, err := read()
		if err != nil {
			t.Fatal(err)
		}
		return hops
	}
}

// waitHops polls get until it returns want and returns how long that took.
func waitHops(t *testing.T, what string, get func(*testing.T) []string, want ...string) time.Duration {
	t.Helper()
	return waitHopsFor(t, 20*time.Second, what, get, want...)
}

// waitHopsFor is waitHops with its own bound.
func waitHopsFor(t *testing.T, bound time.Duration, what string, get func(*testing.T) []string, want ...string) time.Duration {
	t.Helper()
	start := time.Now()
	var got []string
	harness.Poll(t, bound, waitingFor(what, func() (bool, string) {
		got = get(t)
		return slices.Equal(got, want), fmt.Sprintf("next hops %q, want %q", got, want)
	}))
	return time.Since(start)
}

// waitAll polls every getter until each has returned want, and returns
// how long each took from the call.
func waitAll(t *testing.T, what string, get map[string]func(*testing.T) []string, want ...string) map[string]time.Duration {
	t.Helper()
	start := time.Now()
	took := map[string]time.Duration{}
	harness.Poll(t, 20*time.Second, waitingFor(what, func() (bool, string) {
		var pending []string
		for name, g := range get {
			if _, done := took[name]; done {
				continue
			}
			if got := g(t); slices.Equal(got, want) {
				took[name] = time.Since(start)
			} else {
				pending = append(pending, fmt.Sprintf("%s: %q", name, got))
			}
		}
		return len(pending) == 0, fmt.Sprintf("want %q; still %s", want, strings.Join(pending, ", "))
	}))
	return took
}

func (l *lab) waitSessions(t *testing.T, nodes ...string) {
	t.Helper()
	for _, n := range nodes {
		harness.Poll(t, 20*time.Second, waitingFor("FRR session with "+n, func() (bool, string) {
			out, _ := l.frr.Exec("vtysh", "--vty_socket", l.frrDir, "-c", "show bgp neighbor "+n+" json")
			return strings.Contains(out, `"bgpState":"Established"`), out
		}))
		proto := map[string]string{"10.0.0.11": "node_a", "10.0.0.12": "node_b"}[n]
		harness.Poll(t, 20*time.Second, waitingFor("BIRD session with "+n, func() (bool, string) {
			out, _ := l.bird.Exec("birdc", "-s", l.birdDir+"/bird.ctl", "show", "protocols", proto)
			return strings.Contains(out, "Established"), out
		}))
	}
}

// TestPeersLearnAndWithdraw: FRR and BIRD learn node A's route when it is
// assigned, install it in their FIB, and lose it on an Announce without
// the address and on Close.
func TestPeersLearnAndWithdraw(t *testing.T) {
	l := newLab(t)
	a := l.speaker(t, l.a, "10.0.0.11", false)
	l.waitSessions(t, "10.0.0.11")

	frrFIB, birdFIB := fib(t, l.frr), fib(t, l.bird)
	fibs := map[string]func(*testing.T) []string{"FRR": frrFIB, "BIRD": birdFIB}
	signalProc(t, a, syscall.SIGUSR1)
	d := waitAll(t, "FIBs learn A", fibs, "10.0.0.11")
	waitHops(t, "FRR RIB learns A", l.frrRIB, "10.0.0.11")
	waitHops(t, "BIRD RIB learns A", l.birdRIB, "10.0.0.11")
	// The FIBs are polled over netlink (~1 ms a poll; vtysh takes ~100 ms),
	// and a route reaches the FIB after the RIB: these bound the RIB time.
	t.Logf("measured: assignment (Announce) -> route in FRR's RIB and FIB: %d ms; BIRD's: %d ms",
		d["FRR"].Milliseconds(), d["BIRD"].Milliseconds())

	signalProc(t, a, syscall.SIGUSR2)
	d = waitAll(t, "FIBs withdraw A", fibs)
	waitHops(t, "FRR RIB withdraws A", l.frrRIB)
	waitHops(t, "BIRD RIB withdraws A", l.birdRIB)
	t.Logf("measured: withdraw (Announce without the IP) -> gone from FRR's FIB: %d ms; BIRD's: %d ms",
		d["FRR"].Milliseconds(), d["BIRD"].Milliseconds())

	signalProc(t, a, syscall.SIGUSR1)
	waitHops(t, "FRR RIB relearns A", l.frrRIB, "10.0.0.11")
	waitHops(t, "BIRD RIB relearns A", l.birdRIB, "10.0.0.11")
	waitHops(t, "FRR FIB relearns A", frrFIB, "10.0.0.11")
	signalProc(t, a, syscall.SIGTERM)
	d = waitAll(t, "FIBs after Close", fibs)
	waitHops(t, "FRR RIB after Close", l.frrRIB)
	waitHops(t, "BIRD RIB after Close", l.birdRIB)
	t.Logf("measured: Close -> gone from FRR's FIB: %d ms; BIRD's: %d ms", d["FRR"].Milliseconds(), d["BIRD"].Milliseconds())
}

// TestPeersECMPAndNodeLoss: two nodes announce the same VIP, both routers
// install two next hops; node A's speaker is killed (the kernel closes its
// sessions) and then node B goes silent (hold-timer expiry): each loss
// removes exactly that node's path.
func TestPeersECMPAndNodeLoss(t *testing.T) {
	l := newLab(t)
	a := l.speaker(t, l.a, "10.0.0.11", true)
	l.speaker(t, l.b, "10.0.0.12", true)
	both := []string{"10.0.0.11", "10.0.0.12"}
	frrFIB, birdFIB := fib(t, l.frr), fib(t, l.bird)
	fibs := map[string]func(*testing.T) []string{"FRR": frrFIB, "BIRD": birdFIB}
	// Both routers install a two-next-hop ECMP route.
	d := waitAll(t, "FIBs are ECMP over both nodes", fibs, both...)
	t.Logf("measured: two speakers' process start -> ECMP route in FRR's FIB: %d ms; BIRD's: %d ms (GoBGP's first connect waits 1-2 s)",
		d["FRR"].Milliseconds(), d["BIRD"].Milliseconds())
	waitHops(t, "FRR RIB has both nodes", l.frrRIB, both...)
	waitHops(t, "BIRD RIB has both nodes", l.birdRIB, both...)

	signalProc(t, a, syscall.SIGKILL)
	d = waitAll(t, "FIBs after A's speaker died", fibs, "10.0.0.12")
	waitHops(t, "FRR RIB after A's speaker died", l.frrRIB, "10.0.0.12")
	waitHops(t, "BIRD RIB after A's speaker died", l.birdRIB, "10.0.0.12")
	t.Logf("measured: node loss, speaker killed (session closed) -> A's next hop gone from FRR's FIB: %d ms; BIRD's: %d ms",
		d["FRR"].Milliseconds(), d["BIRD"].Milliseconds())

	// Silent loss: B's link goes down, nothing is sent; the routers' hold
	// timers (3 s) expire.
	l.b.Run(t, "ip", "link", "set", "eth0", "down")
	d = waitAll(t, "FIBs after B went silent", fibs)
	waitHops(t, "FRR RIB after B went silent", l.frrRIB)
	waitHops(t, "BIRD RIB after B went silent", l.birdRIB)
	t.Logf("measured: node loss, silent (hold time 3 s) -> B gone from FRR's FIB: %d ms; BIRD's: %d ms",
		d["FRR"].Milliseconds(), d["BIRD"].Milliseconds())
}

// TestPeersGracefulRestart: with graceful restart, FRR and BIRD keep a
// killed speaker's route (FRR marks it stale) until the restarted speaker
// refreshes it, with no gap; Close still withdraws at once; a speaker that
// is killed and never comes back is withdrawn when the restart time runs
// out.
func TestPeersGracefulRestart(t *testing.T) {
	// The routers keep the stale route for the restart time: it must
	// cover a helper's restart (ip netns exec, the test binary, GoBGP's
	// first connect) on a loaded machine, or they flush it and the test
	// fails for the machine's sake.
	const restart = 15 * time.Second
	l := newLab(t)
	a := l.speakerGR(t, l.a, "10.0.0.11", true, restart)
	waitHops(t, "FRR RIB learns A", l.frrRIB, "10.0.0.11")
	waitHops(t, "BIRD RIB learns A", l.birdRIB, "10.0.0.11")

	signalProc(t, a, syscall.SIGKILL)
	harness.Poll(t, 10*time.Second, waitingFor("FRR marks A's path stale", func() (bool, string) {
		hops, stale := l.frrPaths(t, vip+"/32")
		return stale == 1, fmt.Sprintf("next hops %q, %d stale", hops, stale)
	}))
	a = l.speakerGR(t, l.a, "10.0.0.11", true, restart)
	// Until the new speaker's routes replace the stale one, FRR and BIRD
	// must keep a path via A at every poll.
	harness.Poll(t, 20*time.Second, waitingFor("FRR refreshes A's path", func() (bool, string) {
		hops, stale := l.frrPaths(t, vip+"/32")
		if !slices.Equal(hops, []string{"10.0.0.11"}) {
			t.Fatalf("FRR lost A's route during graceful restart: next hops %q", hops)
		}
		if b := l.birdRIB(t); !slices.Equal(b, []string{"10.0.0.11"}) {
			t.Fatalf("BIRD lost A's route during graceful restart: next hops %q", b)
		}
		return stale == 0, fmt.Sprintf("%d stale paths", stale)
	}))
	l.waitSessions(t, "10.0.0.11")

	// CloseForRestart ends the sessions without a NOTIFICATION: FRR marks
	// the path stale and, as BIRD, keeps it in its FIB at every poll
	// until the restarted speaker's session has refreshed it (FRR keeps
	// stale paths across the new session's OPEN: it says the forwarding
	// state was kept).
	frrFIB, birdFIB := fib(t, l.frr), fib(t, l.bird)
	fibsKeepA := func(when string) {
		for name, f := range map[string]func(*testing.T) []string{"FRR": frrFIB, "BIRD": birdFIB} {
			if hops := f(t); !slices.Equal(hops, []string{"10.0.0.11"}) {
				t.Fatalf("%s's FIB lost A's route %s: next hops %q", name, when, hops)
			}
		}
	}
	stopped := time.Now()
	signalProc(t, a, syscall.SIGHUP)
	harness.Poll(t, 10*time.Second, waitingFor("FRR marks A's path stale after CloseForRestart", func() (bool, string) {
		fibsKeepA("after CloseForRestart")
		hops, stale := l.frrPaths(t, vip+"/32")
		return stale == 1, fmt.Sprintf("next hops %q, %d stale", hops, stale)
	}))
	a = l.speakerGR(t, l.a, "10.0.0.11", true, restart)
	harness.Poll(t, 20*time.Second, waitingFor("FRR refreshes A's path after CloseForRestart", func() (bool, string) {
		fibsKeepA("while A restarts")
		hops, stale := l.frrPaths(t, vip+"/32")
		if !slices.Equal(hops, []string{"10.0.0.11"}) {
			t.Fatalf("FRR lost A's route during graceful restart: next hops %q", hops)
		}
		return stale == 0, fmt.Sprintf("%d stale paths", stale)
	}))
	t.Logf("measured: graceful restart, CloseForRestart -> refreshed at FRR %d ms, the route in both FIBs throughout", time.Since(stopped).Milliseconds())
	l.waitSessions(t, "10.0.0.11")

	// Close ends the sessions with a Cease: FRR drops the route at once and
	// never keeps it as stale.
	signalProc(t, a, syscall.SIGTERM)
	harness.Poll(t, 20*time.Second, waitingFor("FRR drops A's route after Close", func() (bool, string) {
		hops, stale := l.frrPaths(t, vip+"/32")
		if stale > 0 {
			t.Fatalf("FRR kept A's route as stale after Close: next hops %q", hops)
		}
		return len(hops) == 0, fmt.Sprintf("next hops %q", hops)
	}))
	waitHops(t, "BIRD drops A's route after Close", l.birdRIB)

	// Killed and never back: gone after the restart time.
	a = l.speakerGR(t, l.a, "10.0.0.11", true, restart)
	waitHops(t, "FRR RIB learns A again", l.frrRIB, "10.0.0.11")
	waitHops(t, "BIRD RIB learns A again", l.birdRIB, "10.0.0.11")
	waitHops(t, "FRR FIB learns A again", frrFIB, "10.0.0.11")
	killed := time.Now()
	signalProc(t, a, syscall.SIGKILL)
	waitHopsFor(t, restart+time.Minute, "FRR FIB after the restart time", frrFIB)
	d := time.Since(killed)
	waitHops(t, "FRR RIB after the restart time", l.frrRIB)
	waitHops(t, "BIRD RIB after the restart time", l.birdRIB)
	t.Logf("measured: graceful restart, speaker killed for good -> gone from FRR's FIB: %d ms (restart time %s)", d.Milliseconds(), restart)
}

// TestPeersIPv6: a /128 over an IPv6 session reaches FRR's RIB and FIB
// with the node's address as next hop, and is withdrawn.
func TestPeersIPv6(t *testing.T) {
	const vip6 = "2001:db8:100::1"
	l := newLab(t)
	a := startHelper(t, l.a, helperConfig{
		RouterID: netip.MustParseAddr("10.0.0.11"),
		Peers:    []netip.Addr{netip.MustParseAddr("fd00::1")},
		PeerASNs: []uint32{64513},
		Announce: []string{vip6},
	})
	harness.Poll(t, 20*time.Second, waitingFor("FRR session with fd00::11", func() (bool, string) {
		out, _ := l.frr.Exec("vtysh", "--vty_socket", l.frrDir, "-c", "show bgp neighbor fd00::11 json")
		return strings.Contains(out, `"bgpState":"Established"`), out
	}))
	frrFIB := fibFor(t, l.frr, netip.MustParsePrefix(vip6+"/128"))
	frrRIB := func(t *testing.T) []string { h, _ := l.frrPaths(t, vip6+"/128"); return h }

	signalProc(t, a, syscall.SIGUSR1)
	d := waitHops(t, "FRR FIB learns the /128", frrFIB, "fd00::11")
	waitHops(t, "FRR RIB learns the /128", frrRIB, "fd00::11")
	t.Logf("measured: IPv6 assignment (Announce) -> /128 in FRR's RIB and FIB: %d ms", d.Milliseconds())

	signalProc(t, a, syscall.SIGUSR2)
	waitHops(t, "FRR FIB withdraws the /128", frrFIB)
	waitHops(t, "FRR RIB withdraws the /128", frrRIB)
}

// waitingFor adapts a check that says why it does not hold yet to
// harness.Poll.
func waitingFor(what string, ok func() (bool, string)) func() error {
	return func() error {
		if done, last := ok(); !done {
			return fmt.Errorf("waiting for %s: %s", what, last)
		}
		return nil
	}
}

func signalProc(t *testing.T, c *exec.Cmd, s syscall.Signal) {
	t.Helper()
	if err := c.Process.Signal(s); err != nil {
		t.Fatalf("sending %v to pid %d: %v", s, c.Process.Pid, err)
	}
}

// The BFD lab: FRR with bfdd (bgpd's "neighbor NODES bfd", FRR's
// defaults 300 ms x 3) and BIRD with its bfd protocol (300 ms x 3), both
// with a 9 s hold time, so that a withdrawal well within it is BFD's
// doing; node A's speaker runs BFD 300 ms x 3 with both.

// bfdPeering is how both routers of the BFD lab peer with node A.
func bfdPeering(routerID string, asn uint32) routers.Peering {
	return routers.Peering{
		RouterID: netip.MustParseAddr(routerID), ASN: asn, NodeASN: 64512,
		Nodes: []netip.Addr{netip.MustParseAddr("10.0.0.11")}, Keepalive: 3, Hold: 9, BFD: true,
	}
}

type bfdLab struct {
	frr, bird, a *netns.NS
	f            *routers.FRR
	b            *routers.BIRD
}

func newBFDLab(t *testing.T) *bfdLab {
	t.Helper()
	return newBFDLabPeering(t, bfdPeering("10.0.0.1", 64513), bfdPeering("10.0.0.2", 64514))
}

// newBFDLabPeering is newBFDLab with FRR and BIRD peering as frr and bird
// say.
func newBFDLabPeering(t *testing.T, frr, bird routers.Peering) *bfdLab {
	t.Helper()
	netns.Require(t)
	requireBinaries(t)
	sw := netns.NewBridge(t, "sw")
	l := &bfdLab{frr: netns.New(t, "rfrr"), bird: netns.New(t, "rbird"), a: netns.New(t, "nodea")}
	for i, n := range []struct {
		ns   *netns.NS
		addr string
	}{{l.frr, "10.0.0.1/24"}, {l.bird, "10.0.0.2/24"}, {l.a, "10.0.0.11/24"}} {
		sw.Attach(t, n.ns, "eth0", net.HardwareAddr{2, 0, 0, 0, 0, byte(i + 1)}, netip.MustParsePrefix(n.addr))
	}
	l.f = routers.StartFRRWithBFD(t, l.frr, frr.FRRConf())
	l.b = routers.StartBIRD(t, l.bird, bird.BIRDConf())
	// The routers stand for routers on hardware of their own: their
	// detection is not what is measured, nor what a loaded node starves.
	l.f.Realtime(t)
	l.b.Realtime(t)
	return l
}

// bfdNodeA is node A's speaker in the BFD lab: it announces the VIP to
// both routers with a 9 s hold time and BFD at 300 ms x 3, and restarts
// gracefully with restart set.
func bfdNodeA(restart time.Duration) helperConfig {
	return helperConfig{
		RouterID:    netip.MustParseAddr("10.0.0.11"),
		Peers:       []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")},
		PeerASNs:    []uint32{64513, 64514},
		Announce:    []string{vip},
		AtStart:     true,
		HoldTime:    9 * time.Second,
		RestartTime: restart,
		BFD:         &BFD{MinRx: 300 * time.Millisecond, MinTx: 300 * time.Millisecond, Multiplier: 3},
	}
}

// bfdStableWindow is how long a BFD session and its route must have held
// before a test measures a failure from them: more than two detection
// times (900 ms), so that a session a starved process let flap during the
// setup is not what the measurement sees.
const bfdStableWindow = 2 * time.Second

// bfdSetupTimeout bounds the wait for a stable session: generous, as on
// a loaded machine the setup may start over several times.
const bfdSetupTimeout = 3 * time.Minute

// frrBFDUp reports whether FRR's BFD session with node is up.
func (l *bfdLab) frrBFDUp(t *testing.T, node string) (bool, string) {
	out, err := l.f.Vtysh("show bfd peers json")
	if err != nil {
		return false, err.Error()
	}
	var peers []struct {
		Peer   string `json:"peer"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &peers); err != nil {
		return false, fmt.Sprintf("decoding %q: %v", out, err)
	}
	for _, p := range peers {
		if p.Peer == node && p.Status == "up" {
			return true, out
		}
	}
	return false, out
}

// birdBFDUp reports whether BIRD's BFD session with node is up.
func (l *bfdLab) birdBFDUp(t *testing.T, node string) (bool, string) {
	out, err := l.b.Birdc("show", "bfd", "sessions")
	if err != nil {
		return false, err.Error()
	}
	for line := range strings.SplitSeq(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == node && f[2] == "Up" {
			return true, out
		}
	}
	return false, out
}

// dropBFD makes ns drop (or, with on false, accept again) the BFD
// packets src sends it, with nftables.
func dropBFD(t *testing.T, ns *netns.NS, src string, on bool) {
	t.Helper()
	if !on {
		ns.Run(t, "nft", "delete", "table", "inet", "bfdtest")
		return
	}
	ns.Run(t, "nft", "add", "table", "inet", "bfdtest")
	ns.Run(t, "nft", "add", "chain", "inet", "bfdtest", "in", "{ type filter hook input priority 0; }")
	ns.Run(t, "nft", "add", "rule", "inet", "bfdtest", "in", "ip", "saddr", src, "udp", "dport", "3784", "drop")
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func msList(ds []time.Duration) string {
	var out []string
	for _, d := range ds {
		out = append(out, fmt.Sprint(d.Milliseconds()))
	}
	return strings.Join(out, ",")
}

// TestPeersBFD: FRR's bfdd and BIRD's bfd each bring a BFD session with
// the speaker Up. Then, for each router, a few times: the router's
// namespace drops the node's BFD packets (nftables), the router's
// detection expires and it withdraws the route; the speaker, told Down,
// holds its BGP session down; the rule goes, BFD and BGP come back and
// the route returns. And once the other way round: the node drops the
// router's packets, the speaker's own detection expires and it tears the
// BGP session down (a Cease), which withdraws the route at the router.
// Every withdrawal takes well under the 9 s hold time; the measured
// times are logged (failure -> route gone from the router's FIB).
//
// On a loaded machine a starved speaker can miss its 900 ms and flap a
// session: every failure is measured only from a session that has been
// up, with the route installed, for bfdStableWindow (the setup starts
// over until it has), and the measured event is never retried. The
// routers run at realtime priority (routers on hardware of their own),
// the speaker at nice -10 (a daemon with CPU of its own, bfdNice).
func TestPeersBFD(t *testing.T) {
	const node = "10.0.0.11"
	l := newBFDLab(t)
	startHelper(t, l.a, bfdNodeA(0))
	type rtr struct {
		name string
		ns   *netns.NS
		addr string
		up   func(*testing.T, string) (bool, string)
		fib  func(*testing.T) []string
	}
	rs := []rtr{
		{"FRR", l.frr, "10.0.0.1", l.frrBFDUp, fib(t, l.frr)},
		{"BIRD", l.bird, "10.0.0.2", l.birdBFDUp, fib(t, l.bird)},
	}
	restarts := 0
	check := func(r rtr) func() error {
		return func() error {
			if ok, out := r.up(t, node); !ok {
				return fmt.Errorf("%s's BFD session with A is not up: %s", r.name, out)
			}
			if hops := r.fib(t); !slices.Equal(hops, []string{node}) {
				return fmt.Errorf("%s's FIB has next hops %q for the VIP, want A's", r.name, hops)
			}
			return nil
		}
	}
	// stable waits until r's BFD session with A is up and A's route in
	// r's FIB, both for bfdStableWindow and the route still there as it
	// returns: a failure is measured from there.
	stable := func(r rtr) {
		t.Helper()
		for {
			restarts += harness.PollStable(t, bfdSetupTimeout, bfdStableWindow, check(r))
			if slices.Equal(r.fib(t), []string{node}) {
				return
			}
			restarts++
		}
	}
	// measure is the measured event: in, a namespace, drops the BFD
	// packets from src until r has withdrawn the route, and it returns
	// how long that took from the start and from the end of the nft
	// command (on a loaded machine the command alone takes seconds: the
	// failure began somewhere in between).
	measure := func(r rtr, what string, in *netns.NS, src string) (fromStart, fromEnd time.Duration) {
		t.Helper()
		t0 := time.Now()
		dropBFD(t, in, src, true)
		t1 := time.Now()
		waitHops(t, what, r.fib)
		gone := time.Now()
		dropBFD(t, in, src, false)
		return gone.Sub(t0), gone.Sub(t1)
	}
	start := time.Now()
	var steps []string
	for _, r := range rs {
		harness.Poll(t, bfdSetupTimeout, waitingFor(r.name+" FIB learns A", func() (bool, string) {
			hops := r.fib(t)
			return slices.Equal(hops, []string{node}), fmt.Sprintf("next hops %q", hops)
		}))
		steps = append(steps, fmt.Sprintf("%s route %d ms", r.name, time.Since(start).Milliseconds()))
		harness.Poll(t, bfdSetupTimeout, waitingFor(r.name+"'s BFD session with A up", func() (bool, string) { return r.up(t, node) }))
		steps = append(steps, fmt.Sprintf("%s BFD up %d ms", r.name, time.Since(start).Milliseconds()))
	}
	t.Logf("measured: speaker start -> route in both FIBs and both BFD sessions up: %d ms (%s)",
		time.Since(start).Milliseconds(), strings.Join(steps, ", "))

	const runs = 3
	for _, r := range rs {
		n := runs
		if r.name == "BIRD" {
			n = 1 // the FRR runs are the reported median; BIRD shows interop
		}
		var took, after []time.Duration
		for range n {
			stable(r)
			d, da := measure(r, fmt.Sprintf("%s withdraws A after BFD loss (run %d)", r.name, len(took)+1), r.ns, node)
			took, after = append(took, d), append(after, da)
		}
		// Only BFD packets are dropped: the keepalives go on, so the hold
		// timer never runs out and the withdrawal itself is BFD's doing.
		// Its time is reported, not asserted (a loaded machine's nft
		// command alone takes seconds).
		t.Logf("measured: bfd 300ms x3 %s: router drops the node's BFD packets -> route gone from %s's FIB: median %d ms, runs %s ms from the nft command's start, %s ms from its end (hold time 9 s)",
			r.name, r.name, median(took).Milliseconds(), msList(took), msList(after))
	}

	// The speaker's own detection: node A drops the router's packets.
	for _, r := range rs {
		stable(r)
		// Again only BFD is dropped: the session ends because the
		// speaker's BFD went Down, not for the hold timer. Reported only.
		d, da := measure(r, r.name+" withdraws A after the speaker's BFD Down", l.a, r.addr)
		t.Logf("measured: bfd 300ms x3 %s: node drops the router's BFD packets -> speaker tears BGP down -> route gone from %s's FIB: %d ms from the nft command's start, %d ms from its end",
			r.name, r.name, d.Milliseconds(), da.Milliseconds())
	}
	for _, r := range rs {
		stable(r) // and both sessions come back
	}
	t.Logf("measured: BFD sessions that flapped while the test set up a measurement (set up again): %d", restarts)
}

// TestPeersGracefulRestartBFD: a speaker with graceful restart and BFD
// with both routers restarts (CloseForRestart: the BGP sessions end
// without a NOTIFICATION, then the BFD sessions with AdminDown; the
// speaker is away for longer than the detection time): FRR keeps its
// route in its FIB at every poll until the restarted speaker has
// refreshed it, BIRD all but at most 100 ms (see the end). The routers
// are configured as a user running BFD with graceful restart must: FRR
// with "bfd check-control-plane-failure"
// (bgpd ignores the BFD Down of a peer with graceful restart whose BFD
// shares fate with its control plane: our C bit is clear), BIRD with
// "bfd graceful". Measured once without them (load 18): FRR kept the
// route anyway (its BGP session had already ended gracefully when BFD
// went down), BIRD dropped it for 3.8 s. The price, with either: a node
// that dies outright keeps its route until its restart time runs out,
// not the detection time.
func TestPeersGracefulRestartBFD(t *testing.T) {
	const node = "10.0.0.11"
	frr, bird := bfdPeering("10.0.0.1", 64513), bfdPeering("10.0.0.2", 64514)
	frr.BFDGraceful, bird.BFDGraceful = true, true
	l := newBFDLabPeering(t, frr, bird)
	hc := bfdNodeA(30 * time.Second)
	a := startHelper(t, l.a, hc)
	frrFIB, birdFIB := fib(t, l.frr), fib(t, l.bird)
	stable := func() {
		t.Helper()
		harness.PollStable(t, bfdSetupTimeout, bfdStableWindow, func() error {
			for _, r := range []struct {
				name string
				up   func(*testing.T, string) (bool, string)
				fib  func(*testing.T) []string
			}{{"FRR", l.frrBFDUp, frrFIB}, {"BIRD", l.birdBFDUp, birdFIB}} {
				if ok, out := r.up(t, node); !ok {
					return fmt.Errorf("%s's BFD session with A is not up: %s", r.name, out)
				}
				if hops := r.fib(t); !slices.Equal(hops, []string{node}) {
					return fmt.Errorf("%s's FIB has next hops %q for the VIP, want A's", r.name, hops)
				}
			}
			return nil
		})
	}
	// From sessions that held, with the route in both FIBs as the
	// restart begins (a starved speaker may flap one just before).
	for stable(); !slices.Equal(frrFIB(t), []string{node}) || !slices.Equal(birdFIB(t), []string{node}); {
		stable()
	}
	gap := watchFIBs(t, map[string]func(*testing.T) []string{"FRR": frrFIB, "BIRD": birdFIB}, node)
	stopped := time.Now()
	signalProc(t, a, syscall.SIGHUP)
	harness.Poll(t, time.Minute, waitingFor("FRR marks A's path stale", func() (bool, string) {
		hops, stale := frrPaths(t, l.f, vip+"/32")
		return stale == 1, fmt.Sprintf("next hops %q, %d stale", hops, stale)
	}))
	// Longer than FRR's and BIRD's detection time: their BFD sessions
	// are down while the speaker is away.
	time.Sleep(2 * time.Second)
	startHelper(t, l.a, hc)
	harness.Poll(t, time.Minute, waitingFor("FRR refreshes A's path", func() (bool, string) {
		hops, stale := frrPaths(t, l.f, vip+"/32")
		return stale == 0 && slices.Equal(hops, []string{node}), fmt.Sprintf("next hops %q, %d stale", hops, stale)
	}))
	stable()
	t.Logf("measured: graceful restart with BFD: CloseForRestart -> BFD up and the route refreshed at FRR and BIRD %d ms", time.Since(stopped).Milliseconds())
	// FRR never lacked the route. BIRD, in one run of three, lacked it
	// for one 2 ms poll as the restarted session refreshed it; without
	// "bfd graceful" it lacked it for 3.8 s.
	if a := gap(); a["FRR"] > 0 || a["BIRD"] > 100*time.Millisecond {
		t.Errorf("A's route left a FIB during the graceful restart with BFD: %s", a)
	} else if a["BIRD"] > 0 {
		t.Logf("measured: BIRD's FIB lacked A's route for %s as the restarted session refreshed it", a["BIRD"])
	}
}

// watchFIBs watches every FIB every 2 ms until the test ends, and returns
// a function that says for how long and where hop was missing ("" when
// never).
func watchFIBs(t *testing.T, fibs map[string]func(*testing.T) []string, hop string) func() harness.Absences {
	t.Helper()
	has := map[string]func() bool{}
	for name, f := range fibs {
		has[name] = func() bool { return slices.Contains(f(t), hop) }
	}
	return harness.WatchAbsent(t, 2*time.Millisecond, has)
}

// TestPeersRouterGracefulRestart: FRR, configured as a graceful
// restarting router (its forwarding state kept: zebra keeps bgpd's
// routes), has its bgpd killed and restarted; node A's route stays in
// FRR's FIB at every poll, and the speaker, with graceful restart (a
// helper of FRR's restart; FRR sends it no routes to keep), announces it
// again to the new bgpd, which refreshes it.
func TestPeersRouterGracefulRestart(t *testing.T) {
	const node = "10.0.0.11"
	frr := labPeering("10.0.0.1", 64513)
	frr.RestartTime = 30
	l := newLabFRR(t, frr)
	l.speakerGR(t, l.a, node, true, 30*time.Second)
	frrFIB := fib(t, l.frr)
	waitHops(t, "FRR FIB learns A", frrFIB, node)
	waitHops(t, "FRR RIB learns A", l.frrRIB, node)
	gap := watchFIBs(t, map[string]func(*testing.T) []string{"FRR": frrFIB}, node)
	restarted := time.Now()
	l.f.RestartBGPD(t)
	l.waitSessions(t, node)
	harness.Poll(t, time.Minute, waitingFor("the restarted bgpd learns A's route", func() (bool, string) {
		hops, stale := l.frrPaths(t, vip+"/32")
		return slices.Equal(hops, []string{node}) && stale == 0, fmt.Sprintf("next hops %q, %d stale", hops, stale)
	}))
	t.Logf("measured: FRR's bgpd restarted (graceful restart) -> A's route back in its BGP table %d ms, in its FIB throughout",
		time.Since(restarted).Milliseconds())
	if missing := gap().String(); missing != "" {
		t.Errorf("A's route left FRR's FIB while its bgpd restarted: %s", missing)
	}
}
