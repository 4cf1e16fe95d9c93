package cluster

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The address plan, in one place (the package doc draws it).
var (
	// LANPrefix is the nodes' and the router's layer-2 segment.
	LANPrefix = netip.MustParsePrefix("10.0.0.0/24")
	// RouterLAN is the router's address on the LAN, the nodes' default
	// gateway.
	RouterLAN = netip.MustParseAddr("10.0.0.1")
	// ClientPrefix is the network beyond the router ("the internet").
	ClientPrefix = netip.MustParsePrefix("203.0.113.0/24")
	// RouterOutside is the router's address toward the client.
	RouterOutside = netip.MustParseAddr("203.0.113.1")
	// ClientAddr is the client's address.
	ClientAddr = netip.MustParseAddr("203.0.113.10")
	// ClusterCIDR holds every node's pod CIDR.
	ClusterCIDR = netip.MustParsePrefix("10.244.0.0/16")
)

// Ports every pod serves.
const (
	PodHTTPPort = 8080 // HTTP: the body is "<pod> <client addr:port>"
	PodTCPPort  = 9000 // each line in gets "<pod> <client addr:port>\n" back
	PodUDPPort  = 9000 // each datagram gets "<pod> <client addr:port>" back
)

// MaxNodes bounds Plan.Nodes (the address plan has room for more; the one
// guest CPU does not).
const MaxNodes = 6

// Plan is the topology's shape.
type Plan struct {
	Nodes       int // default 3, at most MaxNodes
	PodsPerNode int // default 2
	// Zones are assigned to the nodes round-robin; default zone-a,
	// zone-b, zone-c.
	Zones []string
}

func (p Plan) withDefaults() (Plan, error) {
	if p.Nodes == 0 {
		p.Nodes = 3
	}
	if p.PodsPerNode == 0 {
		p.PodsPerNode = 2
	}
	if len(p.Zones) == 0 {
		p.Zones = []string{"zone-a", "zone-b", "zone-c"}
	}
	if p.Nodes < 1 || p.Nodes > MaxNodes {
		return p, fmt.Errorf("cluster: %d nodes: want 1 to %d", p.Nodes, MaxNodes)
	}
	if p.PodsPerNode < 1 || p.PodsPerNode > 100 {
		return p, fmt.Errorf("cluster: %d pods per node: want 1 to 100", p.PodsPerNode)
	}
	return p, nil
}

// Topology is the built namespaces, links and pod servers.
type Topology struct {
	Router  *Namespace
	Client  *Namespace
	Nodes   []*Node
	closers []io.Closer
}

// Node is one node namespace: its LAN address, its pod CIDR and pods.
type Node struct {
	Name    string
	Zone    string
	NS      *Namespace
	Addr    netip.Addr       // on the LAN (eth0), the Node's InternalIP
	MAC     net.HardwareAddr // eth0's
	PodCIDR netip.Prefix     // its bridge cbr0 holds the first address
	Pods    []*Pod
	// Addr6 and PodCIDR6 are the IPv6 half (topology6_linux.go): its
	// second InternalIP, and its IPv6 pod prefix.
	Addr6    netip.Addr
	PodCIDR6 netip.Prefix

	router *Namespace // holds the node's LAN port (SetLAN)
	daemon *daemon    // set by Cluster
}

// Pod is a namespace behind its node's bridge, serving on the Pod* ports.
type Pod struct {
	Name string
	Node *Node
	NS   *Namespace
	Addr netip.Addr
	// Addr6 is its IPv6 address (topology6_linux.go).
	Addr6 netip.Addr
}

// build creates the topology of p.
func build(p Plan) (_ *Topology, err error) {
	if p, err = p.withDefaults(); err != nil {
		return nil, err
	}
	t := &Topology{}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	if t.Router, err = newNamespace("router"); err != nil {
		return nil, err
	}
	if t.Client, err = newNamespace("client"); err != nil {
		return nil, err
	}
	if err := t.Router.Sysctl("net/ipv4/ip_forward", "1"); err != nil {
		return nil, err
	}
	// The LAN: a bridge in the router's namespace, which holds the
	// router's LAN address; each node plugs in with a veth.
	err = t.Router.configure(func(h *netlink.Handle) error {
		if err := addBridge(h, "lan0", netip.PrefixFrom(RouterLAN, LANPrefix.Bits())); err != nil {
			return err
		}
		return veth(h, "client0", netip.PrefixFrom(RouterOutside, ClientPrefix.Bits()), t.Client, "eth0",
			netip.PrefixFrom(ClientAddr, ClientPrefix.Bits()), RouterOutside)
	})
	if err != nil {
		return nil, err
	}
	for i := 1; i <= p.Nodes; i++ {
		n := &Node{
			Name:     fmt.Sprintf("node%d", i),
			Zone:     p.Zones[(i-1)%len(p.Zones)],
			Addr:     netip.AddrFrom4([4]byte{10, 0, 0, byte(10 + i)}),
			PodCIDR:  netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(i), 0}), 24),
			Addr6:    lanAddr6(i),
			PodCIDR6: podCIDR6(i),
		}
		t.Nodes = append(t.Nodes, n)
		if n.NS, err = newNamespace(n.Name); err != nil {
			return nil, err
		}
		n.router = t.Router
		for _, s := range []string{"net/ipv4/ip_forward", "net/ipv4/conf/all/rp_filter"} {
			v := "1"
			if s == "net/ipv4/conf/all/rp_filter" {
				v = "0"
			}
			if err := n.NS.Sysctl(s, v); err != nil {
				return nil, err
			}
		}
		err = t.Router.configure(func(h *netlink.Handle) error {
			port := "lan-" + n.Name
			if err := veth(h, port, netip.Prefix{}, n.NS, "eth0", netip.PrefixFrom(n.Addr, LANPrefix.Bits()), RouterLAN); err != nil {
				return err
			}
			return enslave(h, port, "lan0")
		})
		if err != nil {
			return nil, err
		}
		if err := n.NS.configure(func(h *netlink.Handle) error {
			eth0, err := h.LinkByName("eth0")
			if err != nil {
				return err
			}
			n.MAC = eth0.Attrs().HardwareAddr
			return nil
		}); err != nil {
			return nil, err
		}
		gw := n.PodCIDR.Addr().Next()
		if err := n.NS.configure(func(h *netlink.Handle) error {
			return addBridge(h, "cbr0", netip.PrefixFrom(gw, n.PodCIDR.Bits()))
		}); err != nil {
			return nil, err
		}
		for j := range p.PodsPerNode {
			pod := &Pod{
				Name:  fmt.Sprintf("%s-pod%d", n.Name, j+1),
				Node:  n,
				Addr:  netip.AddrFrom4([4]byte{10, 244, byte(i), byte(10 + j)}),
				Addr6: podAddr6(i, j),
			}
			n.Pods = append(n.Pods, pod)
			if pod.NS, err = newNamespace(pod.Name); err != nil {
				return nil, err
			}
			err = n.NS.configure(func(h *netlink.Handle) error {
				port := fmt.Sprintf("veth%d", j+1)
				if err := veth(h, port, netip.Prefix{}, pod.NS, "eth0", netip.PrefixFrom(pod.Addr, n.PodCIDR.Bits()), gw); err != nil {
					return err
				}
				return enslave(h, port, "cbr0")
			})
			if err != nil {
				return nil, err
			}
			c, err := serve(pod)
			if err != nil {
				return nil, err
			}
			t.closers = append(t.closers, c)
		}
	}
	// host-gw: every node routes the other nodes' pod CIDRs to them.
	for _, n := range t.Nodes {
		err := n.NS.configure(func(h *netlink.Handle) error {
			eth0, err := h.LinkByName("eth0")
			if err != nil {
				return err
			}
			for _, o := range t.Nodes {
				if o == n {
					continue
				}
				r := &netlink.Route{LinkIndex: eth0.Attrs().Index, Dst: ipNet(o.PodCIDR), Gw: o.Addr.AsSlice()}
				if err := h.RouteAdd(r); err != nil {
					return fmt.Errorf("route %s via %s: %w", o.PodCIDR, o.Addr, err)
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	if err := t.addIPv6(); err != nil {
		return nil, err
	}
	return t, nil
}

// RouteThrough makes the router send traffic for addr (a LoadBalancer or
// external IP) to node n, replacing any route it had for it; n nil removes
// the route. It stands in for an announcer where a suite needs a fixed
// path.
func (t *Topology) RouteThrough(addr netip.Addr, n *Node) error {
	return t.Router.configure(func(h *netlink.Handle) error {
		dst := ipNet(netip.PrefixFrom(addr, addr.BitLen()))
		if n == nil {
			if err := h.RouteDel(&netlink.Route{Dst: dst}); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("delete route %s: %w", addr, err)
			}
			return nil
		}
		if err := h.RouteReplace(&netlink.Route{Dst: dst, Gw: n.Addr.AsSlice()}); err != nil {
			return fmt.Errorf("route %s via %s: %w", addr, n.Addr, err)
		}
		return nil
	})
}

// Close stops the pod servers and releases the namespaces; the kernel
// deletes a namespace, and its links, once no process or handle holds it.
func (t *Topology) Close() {
	for _, c := range t.closers {
		c.Close()
	}
	for _, n := range t.Nodes {
		for _, p := range n.Pods {
			if p.NS != nil {
				p.NS.close()
			}
		}
		if n.NS != nil {
			n.NS.close()
		}
	}
	for _, ns := range []*Namespace{t.Client, t.Router} {
		if ns != nil {
			ns.close()
		}
	}
}

// Pods lists every pod, node by node.
func (t *Topology) Pods() []*Pod {
	var out []*Pod
	for _, n := range t.Nodes {
		out = append(out, n.Pods...)
	}
	return out
}

// addBridge creates bridge name with addr (STP is off by default) and
// multicast snooping off, and sets it up.
func addBridge(h *netlink.Handle, name string, addr netip.Prefix) error {
	off := false
	if err := h.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}, MulticastSnooping: &off}); err != nil {
		return fmt.Errorf("create bridge %s: %w", name, err)
	}
	link, err := h.LinkByName(name)
	if err != nil {
		return err
	}
	if err := h.AddrAdd(link, nlAddr(addr)); err != nil {
		return fmt.Errorf("add %s to %s: %w", addr, name, err)
	}
	return h.LinkSetUp(link)
}

// veth creates a veth pair: local in h's namespace (with localAddr when
// valid), peer named peerName in ns with peerAddr and a default route via
// gw; both ends up.
func veth(h *netlink.Handle, local string, localAddr netip.Prefix, ns *Namespace, peerName string, peerAddr netip.Prefix, gw netip.Addr) error {
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: local}, PeerName: peerName, PeerNamespace: netlink.NsFd(int(ns.ns.Handle()))}
	if err := h.LinkAdd(v); err != nil {
		return fmt.Errorf("create veth %s: %w", local, err)
	}
	link, err := h.LinkByName(local)
	if err != nil {
		return err
	}
	if localAddr.IsValid() {
		if err := h.AddrAdd(link, nlAddr(localAddr)); err != nil {
			return fmt.Errorf("add %s to %s: %w", localAddr, local, err)
		}
	}
	if err := h.LinkSetUp(link); err != nil {
		return fmt.Errorf("set %s up: %w", local, err)
	}
	return ns.configure(func(ph *netlink.Handle) error {
		peer, err := ph.LinkByName(peerName)
		if err != nil {
			return err
		}
		if err := ph.AddrAdd(peer, nlAddr(peerAddr)); err != nil {
			return fmt.Errorf("add %s to %s: %w", peerAddr, peerName, err)
		}
		if err := ph.LinkSetUp(peer); err != nil {
			return fmt.Errorf("set %s up: %w", peerName, err)
		}
		if err := ph.RouteAdd(&netlink.Route{LinkIndex: peer.Attrs().Index, Gw: gw.AsSlice()}); err != nil {
			return fmt.Errorf("default route via %s: %w", gw, err)
		}
		return nil
	})
}

// enslave puts link port into bridge br.
func enslave(h *netlink.Handle, port, br string) error {
	p, err := h.LinkByName(port)
	if err != nil {
		return err
	}
	b, err := h.LinkByName(br)
	if err != nil {
		return err
	}
	if err := h.LinkSetMaster(p, b); err != nil {
		return fmt.Errorf("enslave %s to %s: %w", port, br, err)
	}
	return nil
}

func linkUp(h *netlink.Handle, name string) error {
	link, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("find link %s: %w", name, err)
	}
	return h.LinkSetUp(link)
}

func nlAddr(p netip.Prefix) *netlink.Addr {
	return &netlink.Addr{IPNet: ipNet(p), Flags: unix.IFA_F_NODAD}
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
