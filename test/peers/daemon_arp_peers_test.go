//go:build peers

package peers_test

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/switchyard-lb/switchyard/core/election"
	"github.com/switchyard-lb/switchyard/test/harness"
	"github.com/switchyard-lb/switchyard/test/netns"
)

// l2Label marks the nodes the layer-2 announcer may elect.
const l2Label = "switchyard.dev/l2"

// sameOwnerPair returns the first IPv4 address from 10.0.0.200 and the
// first IPv6 address from fd00::200 that the layer-2 election gives to the
// same one of nodes, and that node. Each address is elected on its own;
// with one owner for both, one crash moves both, and the test can watch
// ARP and NDP move together.
func sameOwnerPair(nodes ...string) (v4, v6 netip.Addr, owner string) {
	in := &election.Input{}
	for _, n := range nodes {
		in.Nodes = append(in.Nodes, election.Candidate{Name: n, Ready: true})
	}
	v4 = netip.MustParseAddr("10.0.0.200")
	owner, _ = election.Layer2Owner(in, v4)
	for v6 = netip.MustParseAddr("fd00::200"); ; v6 = v6.Next() {
		if o, _ := election.Layer2Owner(in, v6); o == owner {
			return v4, v6, owner
		}
	}
}

// serveVIPs puts the addresses on the node's lo and serves them on
// servePort with the node's name. The dataplane is dryrun, so nothing
// else would: with IPVS the daemon binds them to switchyard0 and the
// kernel forwards to the endpoints. As kube-proxy's strictARP does, the
// kernel must neither answer ARP for them (arp_ignore=1) nor use them as
// ARP sources (arp_announce=2): only the announcer speaks for them.
func serveVIPs(t *testing.T, n *daemonNode, vips ...netip.Addr) {
	t.Helper()
	n.ns.Run(t, "sysctl", "-qw", "net.ipv4.conf.all.arp_ignore=1", "net.ipv4.conf.all.arp_announce=2")
	for _, v := range vips {
		args := []string{"addr", "add", netip.PrefixFrom(v, v.BitLen()).String(), "dev", "lo"}
		if v.Is6() {
			args = append(args, "nodad")
		}
		n.ns.Run(t, "ip", args...)
		ln, err := n.ns.Listen("tcp", netip.AddrPortFrom(v, servePort).String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go serveName(ln, n.name)
	}
}

// arpingMACs returns the MACs that answer arping for vip from client.
func arpingMACs(t *testing.T, client *netns.NS, vip netip.Addr) string {
	t.Helper()
	out := strings.ToLower(client.Run(t, "arping", "-c", "2", "-i", "eth0", vip.String()))
	var macs []string
	for _, m := range []net.HardwareAddr{macA, macB} {
		if strings.Contains(out, m.String()) {
			macs = append(macs, m.String())
		}
	}
	return strings.Join(macs, ",")
}

// TestPeersDaemonARP runs the switchyard daemon on node-a and node-b,
// with an ARP announcer (IPv4 and IPv6) for a dual-stack pool, against
// the real API server, plus a third daemon on node-c that the
// announcer's node selector leaves out. A LoadBalancer Service with
// ready endpoints on both nodes gets one address of each family from
// the allocator; a client on the same bridge resolves both to the
// elected owner's MAC (kernel neighbour table, and arping for IPv4) and
// reaches the owner over TCP. The owner's daemon is SIGKILLed: the other
// node's daemon learns of the death through gossip, wins the election
// and announces; the client's entries move to its MAC and TCP reaches it.
//
// node-c is a witness: the daemons' gossip abstains without a strict
// majority alive (core/membership's split-brain guard, membership.quorumGuard),
// so in a two-daemon cluster a crash is only acted upon once Kubernetes
// marks the node NotReady (TestPeersDaemonARPTwoNodes), unless the guard
// is off (TestPeersDaemonARPTwoNodesNoQuorumGuard).
// With three daemons, two of three alive is a majority and gossip decides
// within a second or two (detection, then the guard's fence of 0.6 s).
func TestPeersDaemonARP(t *testing.T) { testDaemonL2(t, l2Witness) }

// TestPeersDaemonARPTwoNodes is TestPeersDaemonARP without the witness:
// after the owner's daemon dies, the survivor sees one of two daemons
// alive, no majority, and keeps abstaining through a sync that saw the
// death; once the owner's Node turns NotReady (what the node lifecycle
// controller does after its grace period; the test does it at once),
// Kubernetes readiness decides and the survivor takes both addresses.
func TestPeersDaemonARPTwoNodes(t *testing.T) { testDaemonL2(t, l2Guarded) }

// TestPeersDaemonARPTwoNodesNoQuorumGuard is the two-node cluster with
// membership.quorumGuard false: gossip alone moves the addresses, within
// a second, with the Node still Ready.
func TestPeersDaemonARPTwoNodesNoQuorumGuard(t *testing.T) { testDaemonL2(t, l2Unguarded) }

// l2Cluster is the membership a layer-2 daemon test runs.
type l2Cluster int

const (
	l2Witness   l2Cluster = iota // node-a, node-b and a witness node-c
	l2Guarded                    // node-a and node-b, quorum guard on
	l2Unguarded                  // node-a and node-b, quorum guard off
)

func testDaemonL2(t *testing.T, cluster l2Cluster) {
	witness := cluster == l2Witness
	lab := newDaemonLab(t)
	client := netns.New(t, "client")
	lab.sw.Attach(t, client, "eth0", macClient,
		netip.MustParsePrefix("10.0.0.100/24"), netip.MustParsePrefix("fd00::100/64"))
	l2 := map[string]string{l2Label: "true"}
	nodes := map[string]*daemonNode{
		"node-a": lab.addNode(t, "node-a", 11, macA, l2),
		"node-b": lab.addNode(t, "node-b", 12, macB, l2),
	}
	if witness {
		nodes["node-c"] = lab.addNode(t, "node-c", 13, net.HardwareAddr{0x02, 0, 0, 0, 0, 0x0c}, nil)
	}
	v4, v6, ownerName := sameOwnerPair("node-a", "node-b")
	owner, survivor := nodes["node-a"], nodes["node-b"]
	if ownerName == "node-b" {
		owner, survivor = survivor, owner
	}
	serveVIPs(t, owner, v4, v6)
	serveVIPs(t, survivor, v4, v6)

	// The pool holds exactly the two addresses, so the allocator's
	// choice is known. Without the witness, a statistics tick every
	// second gives the survivor a sync soon after it sees the death.
	config := fmt.Sprintf(`pools:
  - name: l2
    addresses: [%s/32, %s/128]
announcers:
  - name: l2
    type: arp
    pools: [l2]
    nodeSelector:
      %s: "true"
    arp:
      interfaces: [eth0]
`, v4, v6, l2Label)
	switch cluster {
	case l2Guarded:
		config += "policies:\n  statisticsInterval: 1s\n"
	case l2Unguarded:
		config += "membership:\n  quorumGuard: false\n"
	}
	var all []*daemonNode
	for _, n := range nodes {
		n.start(t, config)
		all = append(all, n)
	}
	waitMembers(t, all...)

	created := time.Now()
	lab.createLB(t, "web", []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}, nodes["node-a"], nodes["node-b"])
	lab.waitIngress(t, "web", v4.String(), v6.String())
	allocated := time.Since(created)
	want := map[string]string{}
	for name := range nodes {
		want[name] = ""
	}
	want[owner.name] = v4.String() + "," + v6.String()
	waitAnnounced(t, nodes, "l2", want)
	if witness {
		t.Logf("measured: daemon: Service and EndpointSlices created -> addresses allocated %.0f ms, -> announced by the elected owner %.0f ms",
			ms(allocated), ms(time.Since(created)))
	}

	// The client resolves both addresses to the owner and reaches it.
	cl := &l2Lab{client: client} // for its client-side helpers
	client.Run(t, "ping", "-c", "1", "-W", "2", v4.String())
	client.Run(t, "ping", "-6", "-c", "1", "-W", "2", v6.String())
	for _, v := range []netip.Addr{v4, v6} {
		if got := cl.neighMAC(t, v); got != owner.mac.String() {
			t.Fatalf("client's neighbour entry for %s = %q, want %s's %s", v, got, owner.name, owner.mac)
		}
		if who, err := whoAnswers(client, v, 3*time.Second); err != nil || who != owner.name {
			t.Fatalf("TCP to %s answered by %q (%v), want %s", v, who, err, owner.name)
		}
	}
	if got := arpingMACs(t, client, v4); got != owner.mac.String() {
		t.Fatalf("arping %s: answers from %q, want only %s's %s", v4, got, owner.name, owner.mac)
	}

	// The owner's daemon crashes.
	w4, w6 := cl.watchNeigh(t, v4), cl.watchNeigh(t, v6)
	t0 := time.Now()
	owner.kill(t)
	cause := "gossip + election"
	if cluster == l2Guarded {
		survivorAbstains(t, survivor, len(nodes)-1)
		owner.setReady(t, false)
		t0 = time.Now()
		cause = "Node NotReady + election"
	}
	moved := map[netip.Addr]time.Duration{}
	answered := map[netip.Addr]time.Duration{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for v, w := range map[netip.Addr]*neighWatch{v4: w4, v6: w6} {
		wg.Go(func() {
			at, err := w.waitMAC(survivor.mac, 10*time.Second)
			if err != nil {
				t.Errorf("after %s's daemon died: %v", owner.name, err)
				return
			}
			d, _, err := firstAnswerFrom(client, v, survivor.name, t0, 10*time.Second)
			if err != nil {
				t.Errorf("after %s's daemon died, TCP to %s: %v", owner.name, v, err)
				return
			}
			mu.Lock()
			moved[v], answered[v] = at.Sub(t0), d
			mu.Unlock()
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	delete(want, owner.name)
	want[survivor.name] = v4.String() + "," + v6.String()
	waitAnnounced(t, nodes, "l2", want)
	if got := arpingMACs(t, client, v4); got != survivor.mac.String() {
		t.Errorf("arping %s after the failover: answers from %q, want only %s's %s", v4, got, survivor.name, survivor.mac)
	}
	// Nothing is renumbered.
	lab.waitIngress(t, "web", v4.String(), v6.String())
	for _, v := range []netip.Addr{v4, v6} {
		what := map[l2Cluster]string{
			l2Witness:   "owner's daemon SIGKILLed",
			l2Guarded:   "two nodes, owner's Node marked NotReady after its daemon died",
			l2Unguarded: "two nodes, quorum guard off, owner's daemon SIGKILLed",
		}[cluster]
		t.Logf("measured: daemon %s failover (%s; %s + %s): client entry moved %.0f ms, first TCP answer from the new owner %.0f ms",
			family(v), what, cause, map[bool]string{true: "GARP", false: "unsolicited NA"}[v.Is4()], ms(moved[v]), ms(answered[v]))
	}
}

// survivorAbstains waits until the survivor's gossip sees only alive
// members and a sync has run after that, and checks that it still
// announces nothing: without a majority, gossip gives no verdict and the
// dead owner's Node is still Ready.
func survivorAbstains(t *testing.T, survivor *daemonNode, alive int) {
	t.Helper()
	harness.Poll(t, 10*time.Second, func() error {
		v, err := survivor.metric("switchyard_membership_members ")
		if err == nil && int(v) != alive {
			err = fmt.Errorf("%s sees %v members alive, want %d", survivor.name, v, alive)
		}
		return err
	})
	seen := time.Now()
	var st *debugState
	harness.Poll(t, 10*time.Second, func() error {
		var err error
		st, err = survivor.state()
		if err == nil && !st.LastSync.After(seen) {
			err = fmt.Errorf("last sync %s, not after %s", st.LastSync, seen)
		}
		return err
	})
	if got := st.Announced["l2"]; len(got) != 0 {
		t.Fatalf("%s took over %v without a gossip majority while the owner's Node is Ready", survivor.name, got)
	}
}

// waitAnnounced waits until each named node's announcer has accepted
// exactly the addresses in want (comma-separated, in order).
func waitAnnounced(t *testing.T, nodes map[string]*daemonNode, announcer string, want map[string]string) {
	t.Helper()
	harness.Poll(t, 30*time.Second, func() error {
		for name, w := range want {
			got, err := nodes[name].announced(announcer)
			if err != nil {
				return err
			}
			if strings.Join(got, ",") != w {
				return fmt.Errorf("%s announces %v, want [%s]", name, got, w)
			}
		}
		return nil
	})
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
