//go:build linux

package dsrlab

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/switchyard-lb/switchyard/core/maglev"
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plan"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/ipvs"
)

const (
	guePort = 6080
	seed    = 0x5eed
	linkMTU = 1500
)

// The frontends: the same address and port over TCP and UDP, on IPv4 and
// IPv6.
var (
	frontend     = model.VirtualServiceKey{Addr: vip, Port: vipPort, Protocol: model.TCP}
	udpFrontend  = model.VirtualServiceKey{Addr: vip, Port: vipPort, Protocol: model.UDP}
	frontend6    = model.VirtualServiceKey{Addr: vip6, Port: vipPort, Protocol: model.TCP}
	udpFrontend6 = model.VirtualServiceKey{Addr: vip6, Port: vipPort, Protocol: model.UDP}
)

// programDSR plans every node's dsr side (planDSR), then gives each
// backend node its own virtual services over its pods.
func (tp *topology) programDSR(t *testing.T, enc model.Encapsulation) {
	t.Helper()
	tp.planDSR(t, enc, tp.nodes)
	local := map[*node][]*pod{}
	for _, p := range tp.pods {
		local[p.node] = append(local[p.node], p)
	}
	for n, pods := range local {
		var vss []model.VirtualService
		for _, k := range tp.frontends(enc) {
			var ds []model.Destination
			for _, p := range pods {
				a := p.addr
				if k.Addr.Is6() {
					a = p.addr6
				}
				ds = append(ds, model.Destination{Addr: a, Port: podPort, Weight: 1})
			}
			vss = append(vss, model.VirtualService{
				VirtualServiceKey: k, Kind: model.FrontendLoadBalancer, Scheduler: "rr", Local: true, Destinations: ds,
			})
		}
		key := model.ServiceKey{Namespace: "lab", Name: "dsr"}
		pl := &model.Plan{Services: map[model.ServiceKey]*model.ServicePlan{key: {Key: key, VirtualServices: vss}}}
		do(t, n.ns, func() error {
			k, a, closeAll, err := openKernel()
			if err != nil {
				return err
			}
			defer closeAll()
			dp, err := ipvs.New(ipvs.Config{Kernel: k, Addresses: a, Sysctls: ipvs.ProcSysctls{}})
			if err != nil {
				return err
			}
			return dp.Apply(t.Context(), plugin.Update{Plan: pl, Full: true})
		})
	}
}

// planDSR plans the dsr side of each node of live, the cluster being live:
// the backend nodes are the live nodes holding pods, weighted by their
// pods, and each node keeps the peer marks of its previous plan. It
// applies each node's plan there.
func (tp *topology) planDSR(t *testing.T, enc model.Encapsulation, live []*node) {
	t.Helper()
	size, err := maglev.SizeFor(len(tp.nodes))
	if err != nil {
		t.Fatal(err)
	}
	var nodes []plan.DSRNode
	for _, n := range live {
		nodes = append(nodes, plan.DSRNode{Name: n.name, Addr: n.addr, Addr6: n.addr6})
	}
	pods := map[string]uint32{}
	for _, p := range tp.pods {
		if slices.Contains(live, p.node) {
			pods[p.node.name]++
		}
	}
	var backends []maglev.Backend
	for name, w := range pods {
		backends = append(backends, maglev.Backend{Name: name, Weight: w})
	}
	var frontends []plan.DSRFrontendInput
	for _, k := range tp.frontends(enc) {
		frontends = append(frontends, plan.DSRFrontendInput{Key: k, Backends: backends})
	}
	for _, n := range live {
		p, err := plan.DSR(plan.DSRInput{
			Self: n.name, Nodes: nodes, TableSize: size, Seed: seed,
			Encapsulation: enc, GUEPort: guePort, LinkMTU: linkMTU, Marks: n.marks,
			Frontends: frontends,
		})
		if err != nil {
			t.Fatal(err)
		}
		n.marks = p.Marks
		do(t, n.ns, func() error { return applyDSR(p) })
	}
}

// frontends are the lab's frontends over enc: TCP and UDP over IPv4 and
// IPv6 (ip6ip6, or GUE over IPv6), SCTP with ipip only.
func (tp *topology) frontends(enc model.Encapsulation) []model.VirtualServiceKey {
	if enc == model.IPIP {
		return []model.VirtualServiceKey{frontend, udpFrontend, frontend6, udpFrontend6, sctpFrontend}
	}
	return []model.VirtualServiceKey{frontend, udpFrontend, frontend6, udpFrontend6}
}

// openKernel opens IPVS and address handles in the calling thread's
// namespace.
func openKernel() (*ipvs.Netlink, *ipvs.NetlinkAddresses, func(), error) {
	k, err := ipvs.NewNetlink()
	if err != nil {
		return nil, nil, nil, err
	}
	a, err := ipvs.NewNetlinkAddresses()
	if err != nil {
		k.Close()
		return nil, nil, nil, err
	}
	return k, a, func() { a.Close(); k.Close() }, nil
}

// applyDSR programs p in the calling thread's namespace.
func applyDSR(p model.DSRPlan) error {
	k, a, closeAll, err := openKernel()
	if err != nil {
		return err
	}
	defer closeAll()
	tun, err := ipvs.NewNetlinkDSRTunnels()
	if err != nil {
		return err
	}
	defer tun.Close()
	d, err := ipvs.NewDSR(ipvs.DSRConfig{Kernel: k, Addresses: a, Sysctls: ipvs.ProcSysctls{}, Firewall: &ipvs.NFTDSR{}, Tunnels: tun})
	if err != nil {
		return err
	}
	return d.Apply(p)
}

// counters are the router's nftables counters of packets to the VIP (IPv4
// or IPv6) per node link (in) and from the VIP per node link (out).
type counters struct{ in, out map[string]uint64 }

// countAtRouter installs the counting table in the router.
func (tp *topology) countAtRouter(t *testing.T) {
	t.Helper()
	do(t, tp.router, func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		table := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: "count"})
		accept := nftables.ChainPolicyAccept
		ch := c.AddChain(&nftables.Chain{Name: "forward", Table: table, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &accept})
		for _, n := range tp.nodes {
			for _, dst := range []netip.Addr{vip, vip6} {
				nfproto, in, out := byte(unix.NFPROTO_IPV4), uint32(16), uint32(12)
				if dst.Is6() {
					nfproto, in, out = unix.NFPROTO_IPV6, 24, 8
				}
				for _, dir := range []struct {
					key    expr.MetaKey
					offset uint32
					name   string
				}{{expr.MetaKeyOIFNAME, in, "in"}, {expr.MetaKeyIIFNAME, out, "out"}} {
					name := make([]byte, unix.IFNAMSIZ)
					copy(name, n.routerSide)
					c.AddRule(&nftables.Rule{Table: table, Chain: ch, Exprs: []expr.Any{
						&expr.Meta{Key: dir.key, Register: 1},
						&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: name},
						&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
						&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{nfproto}},
						&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: dir.offset, Len: uint32(dst.BitLen() / 8)},
						&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: dst.AsSlice()},
						&expr.Counter{},
					}, UserData: []byte(n.name + "/" + dir.name)})
				}
			}
		}
		return c.Flush()
	})
}

func (tp *topology) readCounters(t *testing.T) counters {
	t.Helper()
	got := counters{in: map[string]uint64{}, out: map[string]uint64{}}
	do(t, tp.router, func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		rules, err := c.GetRules(&nftables.Table{Family: nftables.TableFamilyINet, Name: "count"}, &nftables.Chain{Name: "forward"})
		if err != nil {
			return err
		}
		for _, r := range rules {
			name, dir, _ := strings.Cut(string(r.UserData), "/")
			for _, e := range r.Exprs {
				if ctr, ok := e.(*expr.Counter); ok {
					if dir == "in" {
						got.in[name] += ctr.Packets
					} else {
						got.out[name] += ctr.Packets
					}
				}
			}
		}
		return nil
	})
	return got
}

func (c counters) minus(o counters) counters {
	d := counters{in: map[string]uint64{}, out: map[string]uint64{}}
	for k, v := range c.in {
		d.in[k] = v - o.in[k]
	}
	for k, v := range c.out {
		d.out[k] = v - o.out[k]
	}
	return d
}

// takenUp counts the connections a node's IPVS holds towards peers: flows
// it forwarded, each taken up at its first packet here.
func (n *node) takenUp(t *testing.T) int {
	t.Helper()
	total := 0
	do(t, n.ns, func() error {
		k, err := ipvs.NewNetlink()
		if err != nil {
			return err
		}
		defer k.Close()
		svcs, err := k.Services()
		if err != nil {
			return err
		}
		for _, s := range svcs {
			if m, ok := ipvs.MarkOf(s.VirtualServiceKey); !ok || !ipvs.IsDSRMark(m) {
				continue
			}
			ds, err := k.Destinations(s.VirtualServiceKey)
			if err != nil {
				return err
			}
			for _, d := range ds {
				total += int(d.ActiveConns + d.InactiveConns)
			}
		}
		return nil
	})
	return total
}

// round sends one request on every flow and counts those answered by the
// flow's pod, which saw the client's own address and port, and the
// answers per pod; each flow's failed says whether its request failed.
func round(t *testing.T, flows []*flow, size int) (ok int, perPod map[string]int, failures []string) {
	t.Helper()
	perPod = map[string]int{}
	for _, f := range flows {
		f.failed = true
		body, err := f.get(size, 20*time.Second)
		if err != nil {
			failures = append(failures, fmt.Sprintf("port %d: %v", f.port, err))
			continue
		}
		fields := strings.Fields(body)
		if len(fields) != 3 || !strings.HasPrefix(fields[0], "pod") {
			failures = append(failures, fmt.Sprintf("port %d: answer %q", f.port, body))
			continue
		}
		if f.pod == "" {
			f.pod = fields[0]
		}
		if fields[0] != f.pod {
			failures = append(failures, fmt.Sprintf("port %d: answered by %s, then by %s", f.port, f.pod, fields[0]))
			continue
		}
		src, err := netip.ParseAddrPort(fields[1])
		if err != nil || src != netip.AddrPortFrom(f.src, uint16(f.port)) {
			failures = append(failures, fmt.Sprintf("port %d: the pod saw the client as %s", f.port, fields[1]))
			continue
		}
		if fields[2] != fmt.Sprint(size) {
			failures = append(failures, fmt.Sprintf("port %d: the pod read %s bytes of %d", f.port, fields[2], size))
			continue
		}
		perPod[fields[0]]++
		f.failed = false
		ok++
	}
	return ok, perPod, failures
}

// setSloppy sets vs/sloppy_tcp on a node.
func (n *node) setSloppy(t *testing.T, on bool) {
	t.Helper()
	v := map[bool]string{true: "1", false: "0"}[on]
	do(t, n.ns, func() error { return sysctl("net/ipv4/vs/sloppy_tcp", v) })
}
