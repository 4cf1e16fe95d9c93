package cluster_test

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"

	"github.com/switchyard-lb/switchyard/core/config"
	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/test/cluster"
)

// The download-heavy workload of TestDSRLayer2Relief: clients fetching
// a body of bytes each, at once.
const (
	l2ReliefClients = 20
	l2ReliefBytes   = 1 << 20
)

// TestDSRLayer2Relief: a LoadBalancer Service in the layer-2 pool, once
// in nat mode and once in dsr mode, served by pods on the two nodes
// other than the address's owner (the node the router resolves it to).
// 20 clients download 1 MiB each at once; the owner's uplink (eth0)
// counters say what went through it:
//
//	cluster-metric dsr-l2-owner-rx-kib-{nat,dsr}=N
//	cluster-metric dsr-l2-owner-tx-kib-{nat,dsr}=N
//	cluster-metric dsr-l2-owner-replies-kib-{nat,dsr}=N   (packets from the address)
//
// In nat mode every reply comes back through the owner; in dsr mode the
// owner only tunnels the client's packets to the backend nodes, which
// answer the client directly. It requires every download whole and, in
// dsr mode, no packet from the address leaving the owner and the owner
// sending less than a quarter of the bytes downloaded (no reply
// payload); the numbers themselves are reported.
func TestDSRLayer2Relief(t *testing.T) {
	c := requireGuest(t)
	if len(c.Nodes) < 3 {
		t.Fatalf("%d nodes: want 3 (the owner and two backend nodes)", len(c.Nodes))
	}
	// Both Services first, so that each has its own address (one
	// created after the other's deletion could take over its address
	// while a node still holds the other mode's state for it).
	var all []*cluster.Pod
	for _, n := range c.Nodes {
		all = append(all, n.Pods[0])
	}
	modes := []string{"nat", "dsr"}
	svcs := map[string]*cluster.Service{}
	for _, mode := range modes {
		svcs[mode] = createModeLB(t, c, "l2-relief-"+mode, cluster.PoolL2, mode, all...)
	}
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			svc := svcs[mode]
			owner := heldOwner(t, c, svc)
			if mode == "dsr" {
				t.Cleanup(func() {
					if !t.Failed() {
						return
					}
					// What the owner marks now, and what its daemon
					// said (its gossip aside).
					t.Logf("%s's dsr table after the downloads: %s", owner.Name, dsrTableSummary(owner))
					for _, l := range owner.DaemonLogLines(func(l string) bool { return !strings.Contains(l, "component=memberlist") }) {
						t.Logf("%s: %s", owner.Name, l)
					}
				})
			}
			var (
				pods []*cluster.Pod
				eps  []cluster.Endpoint
			)
			for _, n := range others(c, owner) {
				pods = append(pods, n.Pods[0])
				eps = append(eps, cluster.Endpoint{Pod: n.Pods[0]})
			}
			if err := c.WriteEndpoints(t.Context(), svc, eps); err != nil {
				t.Fatal(err)
			}
			if err := answeredOnly(t, c, svc, pods...); err != nil {
				t.Fatalf("%s after its endpoints left %s: %v", svc.Name, owner.Name, err)
			}
			if mode == "dsr" {
				// The answers above may all have come through another
				// node (the election moves the address for moments when
				// the loaded nodes suspect each other): wait for the
				// owner's own table to send every slot to the other
				// nodes (measured: one owner's daemon applied the
				// change only after the downloads, its pod serving 5 of
				// them, at load 35-42).
				waitReleased(t, owner)
			}
			if again := heldOwner(t, c, svc); again != owner {
				t.Fatalf("the owner of %s moved from %s to %s", svc.LoadBalancerIP, owner.Name, again.Name)
			}

			count := countVIP(t, owner, svc.LoadBalancerIP)
			before, vipBefore := uplink(t, owner), count()
			began := time.Now()
			var (
				wg    sync.WaitGroup
				mu    sync.Mutex
				total int64
				errs  []error
				by    = map[string]int{}
			)
			for range l2ReliefClients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					a, n, err := cluster.Download(t.Context(), c.Client, svc.LoadBalancerAddr(cluster.PortHTTP), l2ReliefBytes, 2*time.Minute)
					mu.Lock()
					defer mu.Unlock()
					total += n
					if err == nil && n != l2ReliefBytes {
						err = fmt.Errorf("%d of %d bytes from %s", n, l2ReliefBytes, a.Pod)
					}
					if err != nil {
						errs = append(errs, fmt.Errorf("%s: %w", time.Now().Format("15:04:05.000"), err))
						return
					}
					by[a.Pod]++
				}()
			}
			wg.Wait()
			took := time.Since(began)
			after, vipAfter := uplink(t, owner), count()
			rx, tx := after.RxBytes-before.RxBytes, after.TxBytes-before.TxBytes
			replies := vipAfter.outBytes - vipBefore.outBytes
			t.Logf("%s: %d clients downloaded %d KiB through %s (owner %s) in %s, served by %v; the owner's eth0: rx %d KiB, tx %d KiB, of which %d KiB in %d packets from the address",
				mode, l2ReliefClients, total>>10, svc.LoadBalancerIP, owner.Name, took.Round(time.Millisecond), by, rx>>10, tx>>10, replies>>10, vipAfter.out-vipBefore.out)
			t.Logf("cluster-metric dsr-l2-owner-rx-kib-%s=%d", mode, rx>>10)
			t.Logf("cluster-metric dsr-l2-owner-tx-kib-%s=%d", mode, tx>>10)
			t.Logf("cluster-metric dsr-l2-owner-replies-kib-%s=%d", mode, replies>>10)
			for _, err := range errs[:min(5, len(errs))] {
				t.Errorf("%s: %v", mode, err)
			}
			if mode != "dsr" {
				return
			}
			if n := vipAfter.out - vipBefore.out; n > 0 {
				t.Errorf("dsr: %d packets (%d bytes) from %s left its owner %s: want none (replies leave the backend nodes)", n, replies, svc.LoadBalancerIP, owner.Name)
			}
			if tx*4 > uint64(total) {
				t.Errorf("dsr: the owner %s sent %d KiB for %d KiB downloaded: want under a quarter (no reply payload)", owner.Name, tx>>10, total>>10)
			}
		})
	}
}

// heldOwner returns the node the router resolves svc's address to,
// once it answered the same three times in a row (bounded by moved).
func heldOwner(t *testing.T, c *cluster.Cluster, svc *cluster.Service) *cluster.Node {
	t.Helper()
	deadline := time.Now().Add(moved)
	var last *cluster.Node
	row := 0
	for {
		owner, err := routerOwner(t, c, svc)
		switch {
		case err != nil:
			row = 0
		case owner == last:
			row++
		default:
			last, row = owner, 1
		}
		if row == 3 {
			return owner
		}
		if time.Now().After(deadline) {
			t.Fatalf("no node held %s three times in a row within %s: %v", svc.LoadBalancerIP, moved, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// uplink reads n's eth0 counters.
func uplink(t *testing.T, n *cluster.Node) netlink.LinkStatistics {
	t.Helper()
	var st netlink.LinkStatistics
	err := n.NS.Do(func() error {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		if l.Attrs().Statistics == nil {
			return fmt.Errorf("eth0: no statistics")
		}
		st = *l.Attrs().Statistics
		return nil
	})
	if err != nil {
		t.Fatalf("%s: %v", n.Name, err)
	}
	return st
}

// releasedWithin bounds waitReleased: a loaded owner's daemon (shipped
// gossip, load 37) took up to 1m56s, its table's reads included.
const releasedWithin = 5 * time.Minute

// waitReleased waits (bounded by releasedWithin) until every map of n's
// dsr table marks all its slots for other nodes: n serves no dsr flow
// itself.
func waitReleased(t *testing.T, n *cluster.Node) {
	t.Helper()
	began := time.Now()
	for reads := 1; ; reads++ {
		read := time.Now()
		full, err := dsrTableFull(n)
		if err == nil && full {
			t.Logf("%s's dsr table sends every slot to the other nodes (waited %s, %d reads of its maps, the last %s)",
				n.Name, time.Since(began).Round(time.Millisecond), reads, time.Since(read).Round(time.Millisecond))
			return
		}
		if time.Since(began) > releasedWithin {
			t.Fatalf("%s's dsr table still keeps slots there after %s (%v): %s", n.Name, releasedWithin, err, dsrTableSummary(n))
		}
		time.Sleep(time.Second)
	}
}

// dsrTableFull reports whether n's dsr table has maps and every one
// holds a mark for each of the table's slots (the daemons' default
// size).
func dsrTableFull(n *cluster.Node) (bool, error) {
	full := false
	err := n.NS.Do(func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		defer c.CloseLasting()
		sets, err := c.GetSets(&nftables.Table{Family: nftables.TableFamilyINet, Name: ipvs.DSRTableName})
		if err != nil {
			return err
		}
		for _, s := range sets {
			if !s.IsMap {
				continue
			}
			els, err := c.GetSetElements(s)
			if err != nil {
				return err
			}
			if len(els) != config.DefaultDSRTableSize {
				return fmt.Errorf("map %s: %d of %d slots marked", s.Name, len(els), config.DefaultDSRTableSize)
			}
			full = true
		}
		return nil
	})
	return full && err == nil, err
}

// dsrTableSummary is n's dsr table in one line: each map with its
// number of elements by mark, and the number of rules.
func dsrTableSummary(n *cluster.Node) string {
	var b strings.Builder
	err := n.NS.Do(func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		defer c.CloseLasting()
		tbl := &nftables.Table{Family: nftables.TableFamilyINet, Name: ipvs.DSRTableName}
		sets, err := c.GetSets(tbl)
		if err != nil {
			return err
		}
		slices.SortFunc(sets, func(a, b *nftables.Set) int { return strings.Compare(a.Name, b.Name) })
		for _, s := range sets {
			els, err := c.GetSetElements(s)
			if err != nil {
				return err
			}
			marks := map[uint32]int{}
			for _, e := range els {
				if len(e.Val) == 4 {
					marks[binary.NativeEndian.Uint32(e.Val)]++
				}
			}
			fmt.Fprintf(&b, "%s %d:", s.Name, len(els))
			for _, m := range slices.Sorted(maps.Keys(marks)) {
				fmt.Fprintf(&b, " %#x=%d", m, marks[m])
			}
			b.WriteString("; ")
		}
		rules, err := c.GetRules(tbl, &nftables.Chain{Name: "prerouting", Table: tbl})
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%d prerouting rules", len(rules))
		return nil
	})
	if err != nil {
		return fmt.Sprintf("%s: %v", n.Name, err)
	}
	return b.String()
}
