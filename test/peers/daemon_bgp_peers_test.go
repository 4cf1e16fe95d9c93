//go:build peers

package peers_test

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchyard-lb/switchyard/test/harness"
)

// TestPeersDaemonBGP runs the switchyard daemon on node-a and node-b with
// a BGP announcer whose embedded speakers peer with FRR and BIRD, against
// the real API server. Two LoadBalancer Services with ready endpoints on
// both nodes get addresses from the pool; both routers learn each /32
// from both nodes and install ECMP routes, over which connections from
// FRR's namespace reach both nodes. Changing one Service to ClusterIP
// withdraws its route (the other stays); SIGKILLing node-a's daemon
// removes node-a's next hop (the kernel closes its sessions; there is no
// graceful restart) and traffic reaches node-b only; deleting the other
// Service withdraws it from the survivor.
func TestPeersDaemonBGP(t *testing.T) {
	requireRouters(t)
	lab := newDaemonLab(t)
	routers := []*router{startFRR(t, lab.sw), startBIRD(t, lab.sw)}
	a := lab.addNode(t, "node-a", 11, macA, nil)
	b := lab.addNode(t, "node-b", 12, macB, nil)
	pool := netip.MustParsePrefix("198.51.100.0/28")
	config := bgpConfig("edge", pool, "", peer(frrAddr, frrASN, "holdTime: 3s"), peer(birdAddr, birdASN, "holdTime: 3s"))
	started := time.Now()
	a.start(t, config)
	b.start(t, config)
	harness.Poll(t, 30*time.Second, func() error {
		for _, r := range routers {
			for _, n := range []*daemonNode{a, b} {
				if err := r.established(n.addr4.String()); err != nil {
					return err
				}
			}
		}
		return nil
	})
	t.Logf("measured: daemon BGP: two daemons started -> sessions with FRR and BIRD established %.0f ms (GoBGP's first connect waits 1-2 s)",
		ms(time.Since(started)))

	both := []string{a.addr4.String(), b.addr4.String()}
	created := time.Now()
	lab.createLB(t, "web", []corev1.IPFamily{corev1.IPv4Protocol}, a, b)
	lab.createLB(t, "api", []corev1.IPFamily{corev1.IPv4Protocol}, a, b)
	web, api := lbPrefix(t, lab, "web", pool), lbPrefix(t, lab, "api", pool)
	if web == api {
		t.Fatalf("web and api were both given %s", web)
	}
	d := waitRoutes(t, routers, created, web, both...)
	waitRoutes(t, routers, created, api, both...)
	t.Logf("measured: daemon BGP: Service created -> ECMP route over both nodes in FRR's FIB %.0f ms, BIRD's %.0f ms",
		ms(d["FRR"]), ms(d["BIRD"]))
	checkRIBs(t, routers, web, both...)
	checkRIBs(t, routers, api, both...)
	// Traffic follows the routes: the nodes serve api's address (the
	// dryrun dataplane does not), and connections from FRR's namespace,
	// hashed over the ECMP route by ports too, reach both nodes (all 32
	// to one node has a chance of 2^-31).
	for _, n := range []*daemonNode{a, b} {
		serveVIPs(t, n, api.Addr())
	}
	frr := routers[0].ns
	frr.Run(t, "sysctl", "-qw", "net.ipv4.fib_multipath_hash_policy=1")
	seen := map[string]int{}
	for range 32 {
		who, err := whoAnswers(frr, api.Addr(), 3*time.Second)
		if err != nil {
			t.Fatalf("TCP from FRR's namespace to %s: %v", api.Addr(), err)
		}
		seen[who]++
	}
	if seen[a.name] == 0 || seen[b.name] == 0 || len(seen) != 2 {
		t.Fatalf("32 connections from FRR's namespace to %s were answered by %v, want both nodes", api.Addr(), seen)
	}

	// web stops being a LoadBalancer: its address is released and its
	// route withdrawn by both nodes; api's route stays.
	svc, err := lab.srv.Client.CoreV1().Services(lab.ns).Get(t.Context(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Spec.Type = corev1.ServiceTypeClusterIP
	if _, err := lab.srv.Client.CoreV1().Services(lab.ns).Update(t.Context(), svc, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("changing web to ClusterIP: %v", err)
	}
	changed := time.Now()
	d = waitRoutes(t, routers, changed, web)
	t.Logf("measured: daemon BGP: Service changed to ClusterIP -> route gone from FRR's FIB %.0f ms, BIRD's %.0f ms",
		ms(d["FRR"]), ms(d["BIRD"]))
	checkRIBs(t, routers, web)
	lab.waitIngress(t, "web")
	checkRIBs(t, routers, api, both...)

	// node-a's daemon crashes: only node-b's next hop is left.
	killed := time.Now()
	a.kill(t)
	d = waitRoutes(t, routers, killed, api, b.addr4.String())
	t.Logf("measured: daemon BGP: node-a's daemon SIGKILLed -> its next hop gone from FRR's FIB %.0f ms, BIRD's %.0f ms",
		ms(d["FRR"]), ms(d["BIRD"]))
	checkRIBs(t, routers, api, b.addr4.String())
	for range 8 {
		if who, err := whoAnswers(frr, api.Addr(), 3*time.Second); err != nil || who != b.name {
			t.Fatalf("TCP from FRR's namespace to %s after node-a's daemon died answered by %q (%v), want node-b", api.Addr(), who, err)
		}
	}

	// Deleting api withdraws it from the survivor.
	if err := lab.srv.Client.CoreV1().Services(lab.ns).Delete(t.Context(), "api", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	d = waitRoutes(t, routers, deleted, api)
	t.Logf("measured: daemon BGP: Service deleted -> route gone from FRR's FIB %.0f ms, BIRD's %.0f ms",
		ms(d["FRR"]), ms(d["BIRD"]))
	checkRIBs(t, routers, api)
}

// TestPeersDaemonBGPIPv6: the daemons' speakers peer with FRR over IPv6
// and announce an IPv6-only LoadBalancer Service's address as a /128:
// FRR installs it with both nodes' global addresses as ECMP next hops and
// connections reach both nodes; SIGKILLing node-a's daemon removes its
// next hop, and deleting the Service withdraws the route.
func TestPeersDaemonBGPIPv6(t *testing.T) {
	requireRouters(t)
	lab := newDaemonLab(t)
	frr := startFRR(t, lab.sw)
	routers := []*router{frr}
	a := lab.addNode(t, "node-a", 11, macA, nil)
	b := lab.addNode(t, "node-b", 12, macB, nil)
	pool := netip.MustParsePrefix("fd00:100::/124")
	config := bgpConfig("edge6", pool, "", peer(frrAddr6, frrASN, "holdTime: 3s"))
	a.start(t, config)
	b.start(t, config)
	harness.Poll(t, 30*time.Second, func() error {
		for _, n := range []*daemonNode{a, b} {
			if err := frr.established(n.addr6.String()); err != nil {
				return err
			}
		}
		return nil
	})

	both := []string{a.addr6.String(), b.addr6.String()}
	created := time.Now()
	lab.createLB(t, "web6", []corev1.IPFamily{corev1.IPv6Protocol}, a, b)
	web6 := lbPrefix(t, lab, "web6", pool)
	d := waitRoutes(t, routers, created, web6, both...)
	t.Logf("measured: daemon BGP IPv6: Service created -> ECMP /128 over both nodes in FRR's FIB %.0f ms", ms(d["FRR"]))
	checkRIBs(t, routers, web6, both...)
	for _, n := range []*daemonNode{a, b} {
		serveVIPs(t, n, web6.Addr())
	}
	frr.ns.Run(t, "sysctl", "-qw", "net.ipv6.fib_multipath_hash_policy=1")
	seen := map[string]int{}
	for range 32 {
		who, err := whoAnswers(frr.ns, web6.Addr(), 3*time.Second)
		if err != nil {
			t.Fatalf("TCP from FRR's namespace to %s: %v", web6.Addr(), err)
		}
		seen[who]++
	}
	if seen[a.name] == 0 || seen[b.name] == 0 || len(seen) != 2 {
		t.Fatalf("32 connections from FRR's namespace to %s were answered by %v, want both nodes", web6.Addr(), seen)
	}

	killed := time.Now()
	a.kill(t)
	d = waitRoutes(t, routers, killed, web6, b.addr6.String())
	t.Logf("measured: daemon BGP IPv6: node-a's daemon SIGKILLed -> its next hop gone from FRR's FIB %.0f ms", ms(d["FRR"]))
	checkRIBs(t, routers, web6, b.addr6.String())
	if who, err := whoAnswers(frr.ns, web6.Addr(), 3*time.Second); err != nil || who != b.name {
		t.Fatalf("TCP to %s after node-a's daemon died answered by %q (%v), want node-b", web6.Addr(), who, err)
	}

	if err := lab.srv.Client.CoreV1().Services(lab.ns).Delete(t.Context(), "web6", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	d = waitRoutes(t, routers, deleted, web6)
	t.Logf("measured: daemon BGP IPv6: Service deleted -> route gone from FRR's FIB %.0f ms", ms(d["FRR"]))
	checkRIBs(t, routers, web6)
}

// lbPrefix waits for the Service's one address, checks it is in pool
// and returns it as a host route's prefix (/32 or /128).
func lbPrefix(t *testing.T, lab *daemonLab, name string, pool netip.Prefix) netip.Prefix {
	t.Helper()
	var got []string
	harness.Poll(t, 30*time.Second, func() error {
		var err error
		got, err = lab.ingress(t.Context(), name)
		if err == nil && len(got) != 1 {
			err = fmt.Errorf("ingress %v, want one address", got)
		}
		return err
	})
	ip, err := netip.ParseAddr(got[0])
	if err != nil || !pool.Contains(ip) {
		t.Fatalf("Service %s got %q, want an address of %s", name, got[0], pool)
	}
	return netip.PrefixFrom(ip, ip.BitLen())
}

// waitRoutes polls every router's FIB until it routes prefix over
// exactly hops (none: no route), and returns when each got there,
// measured from since.
func waitRoutes(t *testing.T, routers []*router, since time.Time, prefix netip.Prefix, hops ...string) map[string]time.Duration {
	t.Helper()
	fibs := map[string]func() []string{}
	for _, r := range routers {
		fibs[r.name] = r.fib(t, prefix)
	}
	took := map[string]time.Duration{}
	harness.Poll(t, 20*time.Second, func() error {
		var pending []string
		for name, fib := range fibs {
			if _, done := took[name]; done {
				continue
			}
			if got := fib(); slices.Equal(got, hops) {
				took[name] = time.Since(since)
			} else {
				pending = append(pending, fmt.Sprintf("%s's FIB has %v", name, got))
			}
		}
		if len(pending) > 0 {
			return fmt.Errorf("%s", strings.Join(pending, "; "))
		}
		return nil
	})
	return took
}

// checkRIBs checks that every router's BGP table holds prefix with
// exactly hops as next hops (none: no path).
func checkRIBs(t *testing.T, routers []*router, prefix netip.Prefix, hops ...string) {
	t.Helper()
	for _, r := range routers {
		harness.Poll(t, 10*time.Second, func() error {
			if got := r.rib(t, prefix); !slices.Equal(got, hops) {
				return fmt.Errorf("%s next hops %v, want %v", prefix, got, hops)
			}
			return nil
		})
	}
}
