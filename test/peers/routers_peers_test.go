//go:build peers

package peers_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/switchyard-lb/switchyard/test/netns"
	"github.com/switchyard-lb/switchyard/test/netns/routers"
)

// Real routers for the daemon's BGP speaker: FRR (zebra + bgpd) and BIRD 2,
// each in its own namespace on the lab's bridge, peering with the nodes
// 10.0.0.11 and 10.0.0.12 (AS 64512), FRR also with fd00::11 and
// fd00::12. Timers are short (keepalive 1 s,
// hold 3 s, connect retry 1 s) and BIRD's error wait is 1 s instead of
// 60 s (shared/notes/peers.md), so sessions come back quickly.

const (
	nodeASN  = 64512
	frrAddr  = "10.0.0.1"
	frrAddr6 = "fd00::1"
	frrASN   = 64513
	birdAddr = "10.0.0.2"
	birdASN  = 64514
)

func requireRouters(t *testing.T) {
	t.Helper()
	for _, p := range []string{"/usr/lib/frr/zebra", "/usr/lib/frr/bgpd", "/usr/bin/vtysh", "/usr/sbin/bird", "/usr/sbin/birdc"} {
		if _, err := os.Stat(p); err != nil {
			const why = "daemon BGP peer tests need FRR and BIRD 2 (apt-get install frr bird2)"
			if netns.Required() {
				t.Fatalf("%s: %v", why, err)
			}
			t.Skipf("%s: %v", why, err)
		}
	}
}

// router is a routing daemon in its own namespace.
type router struct {
	name string
	ns   *netns.NS
	frr  *routers.FRR  // set for FRR
	bird *routers.BIRD // set for BIRD
	// rib returns the next hops of prefix in the router's BGP table.
	rib func(t *testing.T, prefix netip.Prefix) []string
}

// daemonPeering is how both routers peer with the nodes (FRR over IPv4
// and IPv6, BIRD over IPv4), with ECMP.
func daemonPeering(routerID string, asn uint32, nodes6 ...netip.Addr) routers.Peering {
	return routers.Peering{
		RouterID: netip.MustParseAddr(routerID), ASN: asn, NodeASN: nodeASN,
		Nodes:  []netip.Addr{netip.MustParseAddr("10.0.0.11"), netip.MustParseAddr("10.0.0.12")},
		Nodes6: nodes6, Keepalive: 1, Hold: 3, Multipath: true,
	}
}

var (
	daemonFRRConf  = daemonPeering(frrAddr, frrASN, netip.MustParseAddr("fd00::11"), netip.MustParseAddr("fd00::12")).FRRConf()
	daemonBIRDConf = daemonPeering(birdAddr, birdASN).BIRDConf()
)

// startFRR runs zebra and bgpd in a namespace at 10.0.0.1 and fd00::1
// on sw, peering with the nodes' IPv4 and IPv6 addresses (sessions the
// nodes do not open stay idle).
func startFRR(t *testing.T, sw *netns.Switch) *router {
	t.Helper()
	return startFRRConf(t, sw, daemonFRRConf, false)
}

// startFRRConf is startFRR with bgpd.conf conf, and bfdd too with bfd.
func startFRRConf(t *testing.T, sw *netns.Switch, conf string, bfd bool) *router {
	t.Helper()
	r := &router{name: "FRR", ns: netns.New(t, "rfrr")}
	sw.Attach(t, r.ns, "eth0", net.HardwareAddr{2, 0, 0, 0, 1, 1}, netip.MustParsePrefix(frrAddr+"/24"), netip.MustParsePrefix(frrAddr6+"/64"))
	if bfd {
		r.frr = routers.StartFRRWithBFD(t, r.ns, conf)
	} else {
		r.frr = routers.StartFRR(t, r.ns, conf)
	}
	r.rib = func(t *testing.T, prefix netip.Prefix) []string {
		t.Helper()
		var hops []string
		for _, p := range r.frrPaths(t, prefix) {
			for _, h := range p.Nexthops {
				if h.Scope != "link-local" { // IPv6 paths may carry both
					hops = append(hops, h.IP)
				}
			}
		}
		slices.Sort(hops)
		return hops
	}
	return r
}

// frrPath is one path of FRR's BGP table.
type frrPath struct {
	Stale    bool `json:"stale"` // kept by graceful restart
	Nexthops []struct {
		IP    string `json:"ip"`
		Scope string `json:"scope"`
	} `json:"nexthops"`
}

// frrPaths returns FRR's paths to prefix.
func (r *router) frrPaths(t *testing.T, prefix netip.Prefix) []frrPath {
	t.Helper()
	afi := "ipv4"
	if prefix.Addr().Is6() {
		afi = "ipv6"
	}
	out, err := r.frr.Vtysh("show bgp " + afi + " unicast json")
	if err != nil {
		t.Fatalf("reading FRR's BGP table: %v", err)
	}
	var rib struct {
		Routes map[string][]frrPath `json:"routes"`
	}
	if err := json.Unmarshal([]byte(out), &rib); err != nil {
		t.Fatalf("decoding FRR's BGP table %q: %v", out, err)
	}
	return rib.Routes[prefix.String()]
}

// startBIRD runs BIRD in a namespace at 10.0.0.2 on sw.
func startBIRD(t *testing.T, sw *netns.Switch) *router {
	t.Helper()
	return startBIRDConf(t, sw, daemonBIRDConf)
}

// startBIRDConf is startBIRD with bird.conf conf.
func startBIRDConf(t *testing.T, sw *netns.Switch, conf string) *router {
	t.Helper()
	r := &router{name: "BIRD", ns: netns.New(t, "rbird")}
	sw.Attach(t, r.ns, "eth0", net.HardwareAddr{2, 0, 0, 0, 1, 2}, netip.MustParsePrefix(birdAddr+"/24"))
	r.bird = routers.StartBIRD(t, r.ns, conf)
	r.rib = func(t *testing.T, prefix netip.Prefix) []string {
		t.Helper()
		out, err := r.bird.Birdc("show", "route", "for", prefix.String(), "all")
		if err != nil && strings.Contains(err.Error(), "Network not found") {
			return nil
		}
		if err != nil {
			t.Fatalf("reading BIRD's table: %v", err)
		}
		var hops []string
		for line := range strings.SplitSeq(out, "\n") {
			f := strings.Fields(line)
			if i := slices.Index(f, "via"); i >= 0 && i+1 < len(f) {
				hops = append(hops, f[i+1])
			}
		}
		slices.Sort(hops)
		return slices.Compact(hops)
	}
	return r
}

// established reports whether the router's session with node is up.
// BIRD here peers over IPv4 only.
func (r *router) established(node string) error {
	var out string
	var err error
	if r.frr != nil {
		out, err = r.frr.Vtysh("show bgp neighbor " + node + " json")
		if err == nil && !strings.Contains(out, `"bgpState":"Established"`) {
			err = fmt.Errorf("FRR's session with %s is not established", node)
		}
	} else {
		proto := map[string]string{"10.0.0.11": "node_a", "10.0.0.12": "node_b"}[node]
		out, err = r.bird.Birdc("show", "protocols", proto)
		if err == nil && !strings.Contains(out, "Established") {
			err = fmt.Errorf("BIRD's session with %s is not established: %s", node, strings.TrimSpace(out))
		}
	}
	return err
}

// fib returns a function that reads, over a netlink socket opened in the
// router's namespace, the next hops its kernel uses for prefix: what the
// router installed (~1 ms a read, against ~100 ms for vtysh).
func (r *router) fib(t *testing.T, prefix netip.Prefix) func() []string {
	t.Helper()
	read := r.ns.FIB(t, prefix)
	return func() []string {
		hops, err := read()
		if err != nil {
			return []string{"error: " + err.Error()}
		}
		return hops
	}
}
