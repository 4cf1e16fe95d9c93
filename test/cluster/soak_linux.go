package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/google/nftables"

	"github.com/switchyard-lb/switchyard/ipvs"
)

// DaemonMetrics reads the node's daemon's /metrics and returns the value
// of each sample named in names that has no labels (go_goroutines,
// process_resident_memory_bytes, switchyard_membership_members). A name
// the daemon does not export is an error.
func (n *Node) DaemonMetrics(ctx context.Context, names ...string) (map[string]float64, error) {
	hc := &http.Client{Transport: &http.Transport{DialContext: n.NS.DialContext, DisableKeepAlives: true}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+daemonMetrics+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cluster: %s: /metrics: %w", n.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("cluster: %s: /metrics: %s", n.Name, resp.Status)
	}
	out := make(map[string]float64, len(names))
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || !slices.Contains(names, name) {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return nil, fmt.Errorf("cluster: %s: /metrics: %s: %w", n.Name, name, err)
		}
		out[name] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("cluster: %s: /metrics: %w", n.Name, err)
	}
	for _, name := range names {
		if _, ok := out[name]; !ok {
			return nil, fmt.Errorf("cluster: %s: no %s in /metrics", n.Name, name)
		}
	}
	return out, nil
}

// Conntrack returns how many entries the node's conntrack table holds
// (its namespace's nf_conntrack_count).
func (n *Node) Conntrack() (int, error) {
	var count int
	err := n.NS.Do(func() error {
		b, err := os.ReadFile("/proc/sys/net/netfilter/nf_conntrack_count")
		if err != nil {
			return err
		}
		count, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("cluster: %s: conntrack count: %w", n.Name, err)
	}
	return count, nil
}

// NFTSetSizes returns the number of elements of every set in the node's
// nftables table (ipvs.TableName), by set name; none without the table.
// An interval set counts each range's two ends.
func (n *Node) NFTSetSizes() (map[string]int, error) {
	nft, err := n.nft()
	if err != nil {
		return nil, err
	}
	defer nft.CloseLasting()
	out := map[string]int{}
	sets, err := nft.GetSets(&nftables.Table{Name: ipvs.TableName, Family: nftables.TableFamilyINet})
	if err != nil {
		if errors.Is(err, syscall.ENOENT) {
			return out, nil
		}
		return nil, fmt.Errorf("cluster: %s: nftables sets: %w", n.Name, err)
	}
	for _, s := range sets {
		elems, err := nft.GetSetElements(s)
		if err != nil {
			return nil, fmt.Errorf("cluster: %s: nftables set %s: %w", n.Name, s.Name, err)
		}
		out[s.Name] = len(elems)
	}
	return out, nil
}

// nft opens a lasting nftables connection in the node's namespace: a
// plain Conn opens a socket per call, in the namespace of whatever
// thread makes it.
func (n *Node) nft() (*nftables.Conn, error) {
	var nft *nftables.Conn
	err := n.NS.Do(func() (err error) {
		nft, err = nftables.New(nftables.AsLasting())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: %s: nftables: %w", n.Name, err)
	}
	return nft, nil
}

// ServiceKernel is the KernelState that a ClusterIP Service with the
// ready endpoints eps needs in every node's kernel, real servers without
// their weights (WithoutWeights): a virtual service per port on its
// ClusterIP, each endpoint's pod at the port's target as a real server,
// the ClusterIP on switchyard0 and in the ClusterIP set.
func (s *Service) ServiceKernel(eps []Endpoint) KernelState {
	out := KernelState{Services: map[string][]string{}, Addrs: []netip.Addr{s.ClusterIP}, ClusterIPs: []netip.Addr{s.ClusterIP}}
	for _, p := range servicePorts {
		port, ok := s.Ports[p.name]
		if !ok {
			continue
		}
		ds := []string{}
		for _, e := range eps {
			ds = append(ds, netip.AddrPortFrom(e.Pod.Addr, uint16(p.target)).String())
		}
		slices.Sort(ds)
		ds = slices.Compact(ds)
		out.Services[serviceKey(string(p.proto), netip.AddrPortFrom(s.ClusterIP, port))] = ds
	}
	return out
}

// Merge returns k with o's virtual services and addresses added.
func (k KernelState) Merge(o KernelState) KernelState {
	out := KernelState{Services: map[string][]string{}}
	for _, x := range []KernelState{k, o} {
		for key, ds := range x.Services {
			out.Services[key] = ds
		}
		out.Addrs = append(out.Addrs, x.Addrs...)
		out.ClusterIPs = append(out.ClusterIPs, x.ClusterIPs...)
	}
	slices.SortFunc(out.Addrs, netip.Addr.Compare)
	slices.SortFunc(out.ClusterIPs, netip.Addr.Compare)
	out.Addrs, out.ClusterIPs = slices.Compact(out.Addrs), slices.Compact(out.ClusterIPs)
	return out
}

// WithoutWeights returns k with each real server's weight left out
// ("10.244.1.10:8080" rather than "10.244.1.10:8080 w1"), and the real
// servers at weight 0 (draining: no longer wanted) as an error: a
// kernel that should hold exactly the API's endpoints holds none.
func (k KernelState) WithoutWeights() (KernelState, error) {
	out := KernelState{Services: map[string][]string{}, Addrs: k.Addrs, ClusterIPs: k.ClusterIPs}
	var draining []string
	for key, ds := range k.Services {
		kept := []string{}
		for _, d := range ds {
			addr, w, _ := strings.Cut(d, " ")
			if w == "w0" {
				draining = append(draining, key+" -> "+addr)
			}
			kept = append(kept, addr)
		}
		out.Services[key] = kept
	}
	if len(draining) > 0 {
		slices.Sort(draining)
		return out, fmt.Errorf("cluster: %d real servers at weight 0 (draining): %v", len(draining), draining[:min(5, len(draining))])
	}
	return out, nil
}

// DrainingServers lists the node's real servers at weight 0, each with
// its connection counts ("TCP 10.96.0.10:80 -> 10.244.1.10:8080 active 0
// inactive 2"): what a soak that finds them left over needs to tell
// connections holding them from a dataplane that forgot them.
func (n *Node) DrainingServers() ([]string, error) {
	var k *ipvs.Netlink
	if err := n.NS.Do(func() (err error) { k, err = ipvs.NewNetlink(); return err }); err != nil {
		return nil, fmt.Errorf("cluster: %s: %w", n.Name, err)
	}
	defer k.Close()
	svcs, err := k.Services()
	if err != nil {
		return nil, fmt.Errorf("cluster: %s: IPVS services: %w", n.Name, err)
	}
	var out []string
	for _, s := range svcs {
		dests, err := k.Destinations(s.VirtualServiceKey)
		if err != nil {
			return nil, fmt.Errorf("cluster: %s: IPVS destinations: %w", n.Name, err)
		}
		for _, d := range dests {
			if d.Weight == 0 {
				out = append(out, fmt.Sprintf("%s -> %s active %d inactive %d", serviceKey(s.Protocol.String(), netip.AddrPortFrom(s.Addr, s.Port)),
					netip.AddrPortFrom(d.Addr, d.Port), d.ActiveConns, d.InactiveConns))
			}
		}
	}
	slices.Sort(out)
	return out, nil
}
