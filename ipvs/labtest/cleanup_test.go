//go:build linux

package labtest

import (
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/ipvs/cleanup"
)

// TestCleanup builds, in a namespace of its own, what both proxies leave
// on a node with the real kernel: Switchyard's switchyard0 with a
// ClusterIP service, a NodePort service on the node address recorded in
// the table's owned set, and its nftables table; kube-proxy's kube-ipvs0
// with a ClusterIP service, a NodePort service on the node address and its
// ip and ip6 kube-proxy tables; and foreign objects (IPVS services on the
// node address and on an address nobody binds, an nftables table, a
// non-dummy link). --cleanup-kube-proxy's work removes kube-proxy's
// objects only, --cleanup's Switchyard's only; each is idempotent and the
// foreign objects stay. The guest has no iptables or ipset: the report
// says so (their commands are tested in package cleanup).
func TestCleanup(t *testing.T) {
	requireGuest(t)
	// Inside ns.Do, failures are returned, not t.Fatal'd: Do runs its
	// function on another goroutine.
	ns, err := newNamespace("cleanup")
	if err != nil {
		t.Fatal(err)
	}
	defer ns.close()
	svc := func(addr string, port uint16) model.VirtualServiceKey {
		return model.VirtualServiceKey{Addr: netip.MustParseAddr(addr), Port: port, Protocol: model.TCP}
	}
	var (
		sySvcs  = []model.VirtualServiceKey{svc("10.96.9.10", 80), svc("192.168.77.1", 30080)}
		kpSvcs  = []model.VirtualServiceKey{svc("10.96.9.20", 443), svc("192.168.77.1", 31000)}
		foreign = []model.VirtualServiceKey{svc("192.168.77.1", 8080), svc("203.0.113.9", 30500)}
		fTable  = &nftables.Table{Family: nftables.TableFamilyINet, Name: "foreign"}
	)
	err = ns.Do(func() error {
		k, err := ipvs.NewNetlink()
		if err != nil {
			return err
		}
		defer k.Close()
		a, err := ipvs.NewNetlinkAddresses()
		if err != nil {
			return err
		}
		defer a.Close()
		nl, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return err
		}
		defer nl.Close()

		c, err := nftables.New()
		if err != nil {
			return err
		}
		if err := addLeftovers(k, a, nl, c, sySvcs, kpSvcs, foreign, fTable); err != nil {
			return err
		}

		h, closeHost, err := cleanup.Open()
		if err != nil {
			return err
		}
		defer closeHost()
		sorted := func(keys ...[]model.VirtualServiceKey) []model.VirtualServiceKey {
			out := slices.Concat(keys...)
			slices.SortFunc(out, model.VirtualServiceKey.Compare)
			return out
		}
		check := func(what string, wantSvcs []model.VirtualServiceKey, wantLinks, wantTables []string) {
			t.Helper()
			svcs, links, tables, err := leftovers(k, nl, c)
			if err != nil {
				t.Error(err)
			}
			if diff := cmp.Diff(wantSvcs, svcs, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("%s: IPVS services (-want +got):\n%s", what, diff)
			}
			if diff := cmp.Diff(wantLinks, links); diff != "" {
				t.Errorf("%s: links (-want +got):\n%s", what, diff)
			}
			if diff := cmp.Diff(wantTables, tables); diff != "" {
				t.Errorf("%s: nftables tables (-want +got):\n%s", what, diff)
			}
		}
		check("before", sorted(sySvcs, kpSvcs, foreign),
			[]string{cleanup.SwitchyardDummy, cleanup.KubeProxyDummy, "node0"},
			[]string{"inet foreign", "inet switchyard", "ip kube-proxy", "ip6 kube-proxy"})

		r, err := cleanup.KubeProxy(t.Context(), h)
		if err != nil {
			return fmt.Errorf("KubeProxy: %w", err)
		}
		t.Logf("kube-proxy cleanup: removed %q, skipped %q", r.Removed, r.Skipped)
		check("after the kube-proxy cleanup", sorted(sySvcs, foreign),
			[]string{cleanup.SwitchyardDummy, "node0"}, []string{"inet foreign", "inet switchyard"})
		if len(r.Removed) != 5 {
			t.Errorf("kube-proxy cleanup removed %d objects, want 5 (2 services, kube-ipvs0, 2 tables): %q", len(r.Removed), r.Removed)
		}
		if _, err := exec.LookPath("iptables-save"); err != nil && !slices.Contains(r.Skipped, "iptables IPv4: iptables-save is not installed") {
			t.Errorf("the guest has no iptables-save and the report does not say so: %q", r.Skipped)
		}
		if r, err := cleanup.KubeProxy(t.Context(), h); err != nil || len(r.Removed) != 0 {
			t.Errorf("second KubeProxy = %q, %v; want nothing removed, no error", r.Removed, err)
		}

		r, err = cleanup.Switchyard(t.Context(), h)
		if err != nil {
			return fmt.Errorf("Switchyard: %w", err)
		}
		t.Logf("switchyard cleanup: removed %q", r.Removed)
		check("after the Switchyard cleanup", sorted(foreign), []string{"node0"}, []string{"inet foreign"})
		if r, err := cleanup.Switchyard(t.Context(), h); err != nil || len(r.Removed) != 0 {
			t.Errorf("second Switchyard = %q, %v; want nothing removed, no error", r.Removed, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// addLeftovers builds, in the calling thread's namespace, what both
// proxies and others leave on a node: an address on a non-dummy link (a
// veth), the proxies' dummy links with their addresses, the IPVS
// services sySvcs, kpSvcs and foreign, Switchyard's nftables table
// (sySvcs[0] its ClusterIP, the rest owned NodePorts), kube-proxy's ip
// and ip6 tables and the foreign table fTable.
func addLeftovers(k *ipvs.Netlink, a *ipvs.NetlinkAddresses, nl *netlink.Handle, c *nftables.Conn,
	sySvcs, kpSvcs, foreign []model.VirtualServiceKey, fTable *nftables.Table) error {
	if err := nl.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "node0"}, PeerName: "node0-peer"}); err != nil {
		return fmt.Errorf("add node0: %w", err)
	}
	for _, l := range []struct{ link, addr string }{
		{"node0", "192.168.77.1"}, {cleanup.SwitchyardDummy, "10.96.9.10"}, {cleanup.KubeProxyDummy, "10.96.9.20"},
	} {
		if l.link != "node0" {
			if err := a.EnsureDummy(l.link); err != nil {
				return err
			}
		}
		if err := a.AddAddr(l.link, netip.MustParseAddr(l.addr)); err != nil {
			return err
		}
	}
	for _, key := range slices.Concat(sySvcs, kpSvcs, foreign) {
		if err := k.AddService(ipvs.Service{VirtualServiceKey: key, Scheduler: "rr"}); err != nil {
			return fmt.Errorf("add %v: %w", key, err)
		}
	}
	if err := ipvs.NewNFTables().Sync(ipvs.FirewallSpec{
		ClusterIPs: []netip.Addr{sySvcs[0].Addr}, Owned: sySvcs[1:],
	}); err != nil {
		return fmt.Errorf("program Switchyard's table: %w", err)
	}
	for _, tb := range []*nftables.Table{
		{Family: nftables.TableFamilyIPv4, Name: "kube-proxy"}, {Family: nftables.TableFamilyIPv6, Name: "kube-proxy"}, fTable,
	} {
		c.AddTable(tb)
		c.AddChain(&nftables.Chain{Name: "services", Table: tb})
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("add the kube-proxy and foreign tables: %w", err)
	}
	return nil
}

// leftovers reads what addLeftovers built and the cleanups remove: the
// IPVS services, which of the proxies' and node0 links exist, and the
// nftables tables as "family name", sorted.
func leftovers(k *ipvs.Netlink, nl *netlink.Handle, c *nftables.Conn) (svcs []model.VirtualServiceKey, links, tables []string, err error) {
	list, err := k.Services()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("list IPVS services: %w", err)
	}
	for _, s := range list {
		svcs = append(svcs, s.VirtualServiceKey)
	}
	for _, name := range []string{cleanup.SwitchyardDummy, cleanup.KubeProxyDummy, "node0"} {
		if _, err := nl.LinkByName(name); err == nil {
			links = append(links, name)
		}
	}
	all, err := c.ListTables()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("list nftables tables: %w", err)
	}
	for _, tb := range all {
		tables = append(tables, map[nftables.TableFamily]string{
			nftables.TableFamilyINet: "inet", nftables.TableFamilyIPv4: "ip", nftables.TableFamilyIPv6: "ip6",
		}[tb.Family]+" "+tb.Name)
	}
	slices.Sort(tables)
	return svcs, links, tables, nil
}
