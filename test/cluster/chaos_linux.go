package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"syscall"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"

	"github.com/switchyard-lb/switchyard/core/reconcile"
	"github.com/switchyard-lb/switchyard/ipvs"
)

// APIDown takes the API server away from every node's daemon, as a
// stopped kube-apiserver looks to them: each node's forward of it closes
// its listener and every open connection (watches end), and new
// connections are refused. The harness's own client, which reaches the
// API server directly, keeps working, so a suite can change objects
// meanwhile (as the rest of the control plane would). APIUp ends it.
func (c *Cluster) APIDown() error {
	var errs []error
	for i, f := range c.forwards {
		if f == nil {
			continue
		}
		if err := f.Close(); err != nil {
			errs = append(errs, err)
		}
		c.forwards[i] = nil
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cluster: API server down: %w", err)
	}
	return nil
}

// APIUp gives every node its forward of the API server back.
func (c *Cluster) APIUp() error {
	for i, n := range c.Nodes {
		if c.forwards[i] != nil {
			continue
		}
		f, err := n.NS.forward(c.apiListen, c.apiTarget)
		if err != nil {
			return fmt.Errorf("cluster: API server up on %s: %w", n.Name, err)
		}
		c.forwards[i] = f
	}
	return nil
}

// Health returns the status code and body of the daemon's health
// endpoint path ("/livez", "/readyz", "/healthz"); ctx bounds the wait.
func (n *Node) Health(ctx context.Context, path string) (int, string, error) {
	hc := &http.Client{Transport: &http.Transport{DialContext: n.NS.DialContext, DisableKeepAlives: true}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+daemonHealth+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", fmt.Errorf("cluster: %s: %s: %w", n.Name, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", fmt.Errorf("cluster: %s: %s: %w", n.Name, path, err)
	}
	return resp.StatusCode, string(body), nil
}

// SignalDaemon sends sig to the node's running daemon (SIGSTOP and
// SIGCONT freeze and thaw it; StopDaemon and KillDaemon end it).
func (n *Node) SignalDaemon(sig syscall.Signal) error {
	d := n.daemon
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd == nil {
		return fmt.Errorf("cluster: %s: no daemon running", n.Name)
	}
	if err := syscall.Kill(d.cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("cluster: %s: signal daemon: %w", n.Name, err)
	}
	return nil
}

// Plan returns the node's daemon's /debug/state, decoded.
func (n *Node) Plan(ctx context.Context) (reconcile.State, error) {
	var st reconcile.State
	body, err := n.DebugState(ctx)
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		return st, fmt.Errorf("cluster: %s: decoding /debug/state: %w", n.Name, err)
	}
	return st, nil
}

// KernelState is what a node's kernel holds of the dataplane's objects,
// in a form that compares with cmp.Diff: the IPVS virtual services
// ("TCP 10.96.0.10:80") with their real servers ("10.244.1.10:8080 w1",
// sorted), firewall-mark services left out; the addresses on the dummy
// link switchyard0; and the elements of the nftables table's ClusterIP
// sets (cluster-ips4 and 6).
type KernelState struct {
	Services   map[string][]string
	Addrs      []netip.Addr
	ClusterIPs []netip.Addr
}

// Only returns k restricted to the virtual services and addresses in
// addrs.
func (k KernelState) Only(addrs map[netip.Addr]bool) KernelState {
	out := KernelState{Services: map[string][]string{}}
	for key, ds := range k.Services {
		_, addr, _ := strings.Cut(key, " ")
		ap, _ := netip.ParseAddrPort(addr)
		if addrs[ap.Addr()] {
			out.Services[key] = ds
		}
	}
	keep := func(as []netip.Addr) []netip.Addr {
		var o []netip.Addr
		for _, a := range as {
			if addrs[a] {
				o = append(o, a)
			}
		}
		return o
	}
	out.Addrs, out.ClusterIPs = keep(k.Addrs), keep(k.ClusterIPs)
	return out
}

// Count returns how many virtual services, real servers, dummy-link
// addresses and ClusterIP set elements k holds.
func (k KernelState) Count() (services, servers, addrs, clusterIPs int) {
	for _, ds := range k.Services {
		servers += len(ds)
	}
	return len(k.Services), servers, len(k.Addrs), len(k.ClusterIPs)
}

func serviceKey(proto string, ap netip.AddrPort) string { return proto + " " + ap.String() }

func serverKey(ap netip.AddrPort, weight uint32) string { return fmt.Sprintf("%s w%d", ap, weight) }

// PlannedKernel is the KernelState a daemon's plan (its /debug/state's
// desired state) wants: a virtual service per planned one with its
// destinations, the addresses of every frontend but NodePorts on the
// dummy link, the ClusterIPs in the ClusterIP sets. Rejected Services
// want nothing.
func PlannedKernel(st reconcile.State) KernelState {
	out := KernelState{Services: map[string][]string{}}
	addrs, cips := map[netip.Addr]bool{}, map[netip.Addr]bool{}
	for _, s := range st.Desired {
		if s.Rejected != "" {
			continue
		}
		for _, vs := range s.VirtualServices {
			ds := []string{}
			for _, d := range vs.Destinations {
				ds = append(ds, serverKey(d.Address, d.Weight))
			}
			slices.Sort(ds)
			out.Services[serviceKey(vs.Protocol, vs.Address)] = ds
			if vs.Kind != "NodePort" {
				addrs[vs.Address.Addr()] = true
			}
			if vs.Kind == "ClusterIP" {
				cips[vs.Address.Addr()] = true
			}
		}
	}
	out.Addrs = sortedAddrs(addrs)
	out.ClusterIPs = sortedAddrs(cips)
	return out
}

func sortedAddrs(m map[netip.Addr]bool) []netip.Addr {
	var out []netip.Addr
	for a := range m {
		out = append(out, a)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// VirtualServicesOn counts the node's IPVS virtual services on addrs
// (one dump of the services alone: cheap enough to poll).
func (n *Node) VirtualServicesOn(addrs map[netip.Addr]bool) (int, error) {
	var k *ipvs.Netlink
	if err := n.NS.Do(func() (err error) { k, err = ipvs.NewNetlink(); return err }); err != nil {
		return 0, fmt.Errorf("cluster: %s: %w", n.Name, err)
	}
	defer k.Close()
	svcs, err := k.Services()
	if err != nil {
		return 0, fmt.Errorf("cluster: %s: IPVS services: %w", n.Name, err)
	}
	count := 0
	for _, s := range svcs {
		if addrs[s.Addr] {
			count++
		}
	}
	return count, nil
}

// Kernel reads the node's KernelState from its namespace.
func (n *Node) Kernel() (KernelState, error) {
	out := KernelState{Services: map[string][]string{}}
	var k *ipvs.Netlink
	if err := n.NS.Do(func() (err error) { k, err = ipvs.NewNetlink(); return err }); err != nil {
		return out, fmt.Errorf("cluster: %s: %w", n.Name, err)
	}
	defer k.Close()
	nft, err := n.nft()
	if err != nil {
		return out, err
	}
	defer nft.CloseLasting()
	svcs, err := k.Services()
	if err != nil {
		return out, fmt.Errorf("cluster: %s: IPVS services: %w", n.Name, err)
	}
	for _, s := range svcs {
		if _, mark := ipvs.MarkOf(s.VirtualServiceKey); mark {
			continue
		}
		dests, err := k.Destinations(s.VirtualServiceKey)
		if err != nil {
			return out, fmt.Errorf("cluster: %s: IPVS destinations: %w", n.Name, err)
		}
		ds := []string{}
		for _, d := range dests {
			ds = append(ds, serverKey(netip.AddrPortFrom(d.Addr, d.Port), d.Weight))
		}
		slices.Sort(ds)
		out.Services[serviceKey(s.Protocol.String(), netip.AddrPortFrom(s.Addr, s.Port))] = ds
	}
	err = n.NS.configure(func(h *netlink.Handle) error {
		link, err := h.LinkByName(ipvs.DefaultDummy)
		if err != nil {
			var nf netlink.LinkNotFoundError
			if errors.As(err, &nf) {
				return nil
			}
			return err
		}
		as, err := h.AddrList(link, netlink.FAMILY_ALL)
		if err != nil {
			return err
		}
		for _, a := range as {
			if ip, ok := netip.AddrFromSlice(a.IP); ok {
				out.Addrs = append(out.Addrs, ip.Unmap())
			}
		}
		return nil
	})
	if err != nil {
		return out, err
	}
	slices.SortFunc(out.Addrs, netip.Addr.Compare)
	table := &nftables.Table{Name: ipvs.TableName, Family: nftables.TableFamilyINet}
	for _, name := range []string{"cluster-ips4", "cluster-ips6"} {
		set, err := nft.GetSetByName(table, name)
		if err != nil {
			if errors.Is(err, syscall.ENOENT) {
				continue // no table yet
			}
			return out, fmt.Errorf("cluster: %s: nftables set %s: %w", n.Name, name, err)
		}
		elems, err := nft.GetSetElements(set)
		if err != nil {
			return out, fmt.Errorf("cluster: %s: nftables set %s: %w", n.Name, name, err)
		}
		for _, e := range elems {
			if ip, ok := netip.AddrFromSlice(e.Key); ok {
				out.ClusterIPs = append(out.ClusterIPs, ip)
			}
		}
	}
	slices.SortFunc(out.ClusterIPs, netip.Addr.Compare)
	return out, nil
}

// Restart restarts the router's FRR as a service restart does: bgpd and
// zebra stopped (SIGTERM: their sessions end, zebra removes the routes
// it installed), then started again with the same configuration. It
// returns once bgpd's vty answers; the sessions and routes come back on
// their own.
func (r *FRR) Restart(ctx context.Context) error {
	r.stop()
	if err := r.launch(ctx); err != nil {
		return fmt.Errorf("cluster: FRR restart: %w", err)
	}
	return nil
}
