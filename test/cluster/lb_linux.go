package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// LoadBalancer addresses: one pool per announcer type, each served by its
// own announcer (LoadBalancerConfig). Neither pool assigns automatically:
// a LoadBalancer Service names its pool (ServiceSpec.Pool).
const (
	// PoolL2 is on the nodes' LAN: the elected node answers ARP for each
	// address (the arp announcer, on eth0).
	PoolL2 = "l2"
	// PoolBGP is beyond the LAN: every eligible node announces each
	// address to the router's FRR (the bgp announcer).
	PoolBGP = "bgp"
	// NodeASN is every node's AS, RouterASN the router's (eBGP).
	NodeASN   = 64512
	RouterASN = 64513
)

// The pools' addresses, matching LoadBalancerConfig.
var (
	L2Pool  = netip.MustParsePrefix("10.0.0.240/28")
	BGPPool = netip.MustParsePrefix("198.51.100.0/28")
	// BGPPool6 is the bgp pool's IPv6 range (IPv6 Services, ServiceSpec
	// IPv6), announced over the nodes' IPv6 sessions with the router.
	BGPPool6 = netip.MustParsePrefix("2001:db8:100::/124")
)

// LoadBalancerConfig is the pools and announcers part of
// DefaultDaemonConfig, one block. The BGP hold time is 9 s (keepalive
// 3 s; 3 s flapped on the loaded lab machine), so a node cut off is
// withdrawn within seconds; a daemon that dies closes its session at
// once. The bgp pool is dual-stack: each node peers with the router
// over IPv4 (IPv4 routes) and IPv6 (IPv6 routes, next hop the node's
// Addr6).
const LoadBalancerConfig = `pools:
  - name: l2
    addresses: [10.0.0.240/28]
    autoAssign: false
  - name: bgp
    addresses: [198.51.100.0/28, "2001:db8:100::/124"]
    autoAssign: false
announcers:
  - name: l2
    type: arp
    pools: [l2]
    arp:
      interfaces: [eth0]
  - name: bgp
    type: bgp
    pools: [bgp]
    bgp:
      asn: 64512
      peers:
        - address: 10.0.0.1
          asn: 64513
          holdTime: 9s
        - address: "fd00:10::1"
          asn: 64513
          holdTime: 9s
`

// WaitLoadBalancerIP waits until the daemons allocated the LoadBalancer
// Service's address (status.loadBalancer.ingress), records it in
// svc.LoadBalancerIP and returns it. timeout bounds a failure only.
func (c *Cluster) WaitLoadBalancerIP(ctx context.Context, svc *Service, timeout time.Duration) (netip.Addr, error) {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		s, err := c.Kube.CoreV1().Services(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		for _, in := range s.Status.LoadBalancer.Ingress {
			if a, err := netip.ParseAddr(in.IP); err == nil {
				svc.LoadBalancerIP = a
				return true, nil
			}
		}
		last = fmt.Sprintf("ingress %+v", s.Status.LoadBalancer.Ingress)
		return false, nil
	})
	if err != nil {
		return netip.Addr{}, fmt.Errorf("cluster: Service %s/%s got no LoadBalancer IP: %w (last: %s)", svc.Namespace, svc.Name, err, last)
	}
	return svc.LoadBalancerIP, nil
}

// LoadBalancerAddr is the LoadBalancer IP with the port named name.
func (s *Service) LoadBalancerAddr(name string) netip.AddrPort {
	return netip.AddrPortFrom(s.LoadBalancerIP, s.Ports[name])
}

// NodeOf returns the node an address belongs to: its LAN address or an
// address of its pod CIDR, of either family (what a pod sees as the
// client of traffic an ingress node masqueraded), or nil.
func (t *Topology) NodeOf(a netip.Addr) *Node {
	for _, n := range t.Nodes {
		if n.Addr == a || n.PodCIDR.Contains(a) || n.Addr6 == a || n.PodCIDR6.Contains(a) {
			return n
		}
	}
	return nil
}

// RouterNeighbour returns the MAC address the router's neighbour table
// holds for a on the LAN (lan0), or nil when it has no usable entry.
func (t *Topology) RouterNeighbour(a netip.Addr) (net.HardwareAddr, error) {
	var mac net.HardwareAddr
	err := t.Router.configure(func(h *netlink.Handle) error {
		lan, err := h.LinkByName("lan0")
		if err != nil {
			return err
		}
		neighs, err := h.NeighList(lan.Attrs().Index, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		for _, n := range neighs {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == a &&
				n.State&(netlink.NUD_INCOMPLETE|netlink.NUD_FAILED|netlink.NUD_NOARP) == 0 && len(n.HardwareAddr) > 0 {
				mac = n.HardwareAddr
			}
		}
		return nil
	})
	return mac, err
}

// NodeByMAC returns the node whose LAN interface has mac, or nil.
func (t *Topology) NodeByMAC(mac net.HardwareAddr) *Node {
	for _, n := range t.Nodes {
		if n.MAC.String() == mac.String() {
			return n
		}
	}
	return nil
}

// RouterNextHops returns the gateways of the router's kernel route to
// dst (all of them for an ECMP route), sorted as the kernel holds them;
// none when there is no route.
func (t *Topology) RouterNextHops(dst netip.Prefix) ([]netip.Addr, error) {
	return t.Router.NextHops(dst)
}

// NextHops returns the gateways of the namespace's kernel route to dst
// (all of them for an ECMP route), sorted as the kernel holds them; none
// when there is no route.
func (ns *Namespace) NextHops(dst netip.Prefix) ([]netip.Addr, error) {
	var out []netip.Addr
	err := ns.configure(func(h *netlink.Handle) error {
		family := netlink.FAMILY_V4
		if dst.Addr().Is6() {
			family = netlink.FAMILY_V6
		}
		routes, err := h.RouteListFiltered(family, &netlink.Route{Dst: ipNet(dst)}, netlink.RT_FILTER_DST)
		if err != nil {
			return err
		}
		for _, r := range routes {
			if r.Gw != nil {
				if a, ok := netip.AddrFromSlice(r.Gw); ok {
					out = append(out, a.Unmap())
				}
			}
			for _, nh := range r.MultiPath {
				if a, ok := netip.AddrFromSlice(nh.Gw); ok {
					out = append(out, a.Unmap())
				}
			}
		}
		return nil
	})
	return out, err
}

// SetLAN sets the node's LAN link (the router's bridge port toward it)
// up or down: down cuts the node off the LAN, its daemon still running,
// as a dead NIC or switch port does.
func (n *Node) SetLAN(up bool) error {
	return n.router.configure(func(h *netlink.Handle) error {
		port, err := h.LinkByName("lan-" + n.Name)
		if err != nil {
			return err
		}
		if up {
			return h.LinkSetUp(port)
		}
		return h.LinkSetDown(port)
	})
}

// FirstAnswer measures how long target takes to answer from namespace
// from as check wants: it starts a GET every interval, each on a fresh
// connection with its own timeout (so that no TCP retransmission delays
// the measurement), and returns the first accepted answer and when it
// arrived. It gives up after timeout, which bounds a failure only.
func FirstAnswer(ctx context.Context, from *Namespace, target netip.AddrPort, interval, timeout time.Duration, check func(Answer) error) (Answer, time.Time, error) {
	type result struct {
		a  Answer
		at time.Time
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	won := make(chan result, 1)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		last error
	)
	defer wg.Wait()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		wg.Go(func() {
			actx, acancel := context.WithTimeout(ctx, time.Second)
			defer acancel()
			a, err := Get(actx, from, target)
			if err == nil {
				err = check(a)
			}
			if err == nil {
				select {
				case won <- result{a, time.Now()}:
				default:
				}
				return
			}
			mu.Lock()
			last = err
			mu.Unlock()
		})
		select {
		case r := <-won:
			cancel()
			return r.a, r.at, nil
		case <-ctx.Done():
			mu.Lock()
			defer mu.Unlock()
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return Answer{}, time.Time{}, fmt.Errorf("%s from %s: no accepted answer within %s: %v", target, from.Name, timeout, last)
			}
			return Answer{}, time.Time{}, ctx.Err()
		case <-tick.C:
		}
	}
}
