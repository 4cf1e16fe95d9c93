package cleanup

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/ipvs"
)

// Open returns the Host of the calling thread's network namespace: IPVS
// over generic netlink, links over route netlink, nftables over netlink
// and programs from ExecTools. close releases the handles.
func Open() (h Host, close func() error, err error) {
	k, err := ipvs.NewNetlink()
	if err != nil {
		return Host{}, nil, err
	}
	nl, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		k.Close()
		return Host{}, nil, fmt.Errorf("cleanup: open route netlink: %w", err)
	}
	h = Host{Kernel: k, Links: netlinkLinks{nl}, Tables: nfTables{ipvs.NewNFTables()}, Tools: ExecTools{}, DSR: dsrHost{}}
	return h, func() error { nl.Close(); return k.Close() }, nil
}

type netlinkLinks struct{ h *netlink.Handle }

// dumpRetries bounds the retries of a dump interrupted by a concurrent
// change (the kernel's NLM_F_DUMP_INTR).
const dumpRetries = 5

func (l netlinkLinks) addrList(link netlink.Link) ([]netlink.Addr, error) {
	for i := 0; ; i++ {
		list, err := l.h.AddrList(link, unix.AF_UNSPEC)
		if errors.Is(err, netlink.ErrDumpInterrupted) && i < dumpRetries {
			continue
		}
		return list, err
	}
}

func addrsOf(list []netlink.Addr) []netip.Addr {
	var out []netip.Addr
	for _, a := range list {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			out = append(out, ip.Unmap())
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

func (l netlinkLinks) Addrs(name string) ([]netip.Addr, error) {
	link, err := l.h.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("find link %s: %w", name, err)
	}
	list, err := l.addrList(link)
	if err != nil {
		return nil, fmt.Errorf("list addresses of %s: %w", name, err)
	}
	return addrsOf(list), nil
}

func (l netlinkLinks) LocalAddrs() ([]netip.Addr, error) {
	list, err := l.addrList(nil)
	if err != nil {
		return nil, fmt.Errorf("list addresses: %w", err)
	}
	return addrsOf(list), nil
}

func (l netlinkLinks) DeleteDummy(name string) (bool, error) {
	link, err := l.h.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("find link %s: %w", name, err)
	}
	if link.Type() != "dummy" {
		return false, fmt.Errorf("link %s is a %s link, not dummy: left alone", name, link.Type())
	}
	if err := l.h.LinkDel(link); err != nil {
		return false, fmt.Errorf("delete link %s: %w", name, err)
	}
	return true, nil
}

type nfTables struct{ fw *ipvs.NFTables }

func (t nfTables) Owned() ([]model.VirtualServiceKey, error) {
	st, err := t.fw.Load()
	return st.Owned, err
}

var families = map[string]nftables.TableFamily{
	"inet": nftables.TableFamilyINet,
	"ip":   nftables.TableFamilyIPv4,
	"ip6":  nftables.TableFamilyIPv6,
}

func (nfTables) Delete(t Table) (bool, error) {
	fam, ok := families[t.Family]
	if !ok {
		return false, fmt.Errorf("unknown nftables family %q", t.Family)
	}
	c, err := nftables.New()
	if err != nil {
		return false, fmt.Errorf("nftables: %w", err)
	}
	defer c.CloseLasting()
	tables, err := c.ListTablesOfFamily(fam)
	if err != nil {
		return false, fmt.Errorf("nftables: list tables: %w", err)
	}
	if !slices.ContainsFunc(tables, func(x *nftables.Table) bool { return x.Name == t.Name }) {
		return false, nil
	}
	c.DelTable(&nftables.Table{Name: t.Name, Family: fam})
	if err := c.Flush(); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil // deleted meanwhile
		}
		return false, fmt.Errorf("nftables: delete table %s: %w", t, err)
	}
	return true, nil
}

// dsrHost is DSR over nftables and FOU's generic netlink family.
type dsrHost struct{}

func (dsrHost) Record() (bool, uint16, error)      { return ipvs.ReadDSRRecord() }
func (dsrHost) CloseGUE(port uint16) (bool, error) { return ipvs.CloseGUEPort(port) }
