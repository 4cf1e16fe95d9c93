package ipvs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"syscall"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// NetlinkAddresses is Addresses over route netlink, in the network
// namespace of the thread that created it.
type NetlinkAddresses struct {
	mu sync.Mutex
	h  *netlink.Handle
	// links are the links bound to and unbound from, by name, so that
	// binding an address costs one request rather than two; EnsureDummy
	// and Addrs look the link up again, and a failed bind or unbind drops
	// it (the link may have been replaced).
	links map[string]netlink.Link
	// b sends AddAddrs' and DelAddrs' requests, on a socket of its own.
	b *nlBatch
}

var (
	_ Addresses      = (*NetlinkAddresses)(nil)
	_ AddressBatcher = (*NetlinkAddresses)(nil)
)

// NewNetlinkAddresses opens a route-netlink handle. Only NETLINK_ROUTE: the
// library's default set includes XFRM, which hosts without xfrm_user lack
// (kernel-lab.md pitfall 4).
func NewNetlinkAddresses() (*NetlinkAddresses, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("ipvs: open route netlink: %w", err)
	}
	b, err := dialBatch(unix.NETLINK_ROUTE)
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("ipvs: open route netlink for batches: %w", err)
	}
	return &NetlinkAddresses{h: h, links: map[string]netlink.Link{}, b: b}, nil
}

// Close releases the netlink handle.
func (n *NetlinkAddresses) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.h.Close()
	return n.b.close()
}

func (n *NetlinkAddresses) EnsureDummy(name string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.links, name)
	link, err := n.h.LinkByName(name)
	if err == nil {
		if link.Type() != "dummy" {
			return fmt.Errorf("ipvs: link %s exists and is a %s link, not dummy", name, link.Type())
		}
		return nil
	}
	var notFound netlink.LinkNotFoundError
	if !errors.As(err, &notFound) {
		return fmt.Errorf("ipvs: find link %s: %w", name, dumpErr(err))
	}
	if err := n.h.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: name}}); err != nil {
		return fmt.Errorf("ipvs: create dummy link %s: %w", name, err)
	}
	return nil
}

// cachedLink returns name's link as last looked up, or looks it up.
func (n *NetlinkAddresses) cachedLink(name string) (netlink.Link, error) {
	if l, ok := n.links[name]; ok {
		return l, nil
	}
	return n.link(name)
}

// link looks name's link up, and caches it.
func (n *NetlinkAddresses) link(name string) (netlink.Link, error) {
	delete(n.links, name)
	link, err := n.h.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return nil, fmt.Errorf("link %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("find link %s: %w", name, dumpErr(err))
	}
	n.links[name] = link
	return link, nil
}

func (n *NetlinkAddresses) Addrs(name string) ([]netip.Addr, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	link, err := n.link(name)
	if err != nil {
		return nil, fmt.Errorf("ipvs: list addresses: %w", err)
	}
	// The kernel dumps every address of the namespace (the library
	// filters by link), so any address change on the node, a pod's veth
	// coming or going, can interrupt it.
	list, err := n.h.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("ipvs: list addresses of %s: %w", name, dumpErr(err))
	}
	out := make([]netip.Addr, 0, len(list))
	for _, a := range list {
		if addr, ok := netip.AddrFromSlice(a.IP); ok {
			out = append(out, addr.Unmap())
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out, nil
}

func (n *NetlinkAddresses) AddAddr(name string, a netip.Addr) error {
	return n.addrOp("bind", name, a, func(l netlink.Link, addr *netlink.Addr) error { return n.h.AddrAdd(l, addr) })
}

func (n *NetlinkAddresses) DelAddr(name string, a netip.Addr) error {
	return n.addrOp("unbind", name, a, func(l netlink.Link, addr *netlink.Addr) error { return n.h.AddrDel(l, addr) })
}

// AddAddrs binds addrs several per round trip (AddressBatcher).
func (n *NetlinkAddresses) AddAddrs(name string, addrs []netip.Addr) []error {
	return n.addrBatch("bind", name, addrs, unix.RTM_NEWADDR, unix.NLM_F_CREATE|unix.NLM_F_EXCL, n.AddAddr)
}

// DelAddrs unbinds addrs several per round trip (AddressBatcher).
func (n *NetlinkAddresses) DelAddrs(name string, addrs []netip.Addr) []error {
	return n.addrBatch("unbind", name, addrs, unix.RTM_DELADDR, 0, n.DelAddr)
}

// addrBatch sends a request of type typ for each of addrs, as AddAddr and
// DelAddr send theirs, in batches (nlBatch). Should the link have gone
// (ENODEV: perhaps replaced), the addresses it failed go once more through
// single, which looks the link up again.
func (n *NetlinkAddresses) addrBatch(op, name string, addrs []netip.Addr, typ, flags uint16, single func(string, netip.Addr) error) []error {
	errs := make([]error, len(addrs))
	for i, a := range addrs {
		errs[i] = validAddr(op, a)
	}
	n.mu.Lock()
	link, err := n.cachedLink(name)
	if err != nil {
		n.mu.Unlock()
		for i, a := range addrs {
			if errs[i] == nil {
				errs[i] = addrErr(op, name, a, err)
			}
		}
		return errs
	}
	index := uint32(link.Attrs().Index)
	n.b.send(errs, func(i int, buf []byte) (uint16, uint16, []byte, error) {
		return typ, flags, appendIfAddr(buf, index, addrs[i]), nil
	}, func(i int, err error) error { return addrErr(op, name, addrs[i], err) })
	var gone []int
	for i, err := range errs {
		if err != nil && !errors.Is(err, syscall.EEXIST) && !errors.Is(err, syscall.EADDRNOTAVAIL) {
			delete(n.links, name)
		}
		if errors.Is(err, syscall.ENODEV) {
			gone = append(gone, i)
		}
	}
	n.mu.Unlock()
	for _, i := range gone {
		errs[i] = single(name, addrs[i])
	}
	return errs
}

// appendIfAddr appends the payload of a /32 or /128 address request (an
// ifaddrmsg and its attributes), as vishvananda/netlink writes AddrAdd's
// and AddrDel's for addrOp's address.
func appendIfAddr(buf []byte, index uint32, a netip.Addr) []byte {
	family := byte(unix.AF_INET6)
	if a.Is4() {
		family = unix.AF_INET
	}
	buf = append(buf, family, byte(a.BitLen()), unix.IFA_F_NODAD, unix.RT_SCOPE_UNIVERSE)
	buf = binary.NativeEndian.AppendUint32(buf, index)
	b := addrBytes(a)
	buf = attr(buf, unix.IFA_LOCAL, b...)
	return attr(buf, unix.IFA_ADDRESS, b...)
}

func validAddr(op string, a netip.Addr) error {
	if !a.IsValid() || a.Is4In6() {
		return fmt.Errorf("ipvs: %s address %v: want an IPv4 or IPv6 address", op, a)
	}
	return nil
}

func (n *NetlinkAddresses) addrOp(op, name string, a netip.Addr, fn func(netlink.Link, *netlink.Addr) error) error {
	if err := validAddr(op, a); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	addr := &netlink.Addr{
		IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(a.BitLen(), a.BitLen())},
		// No duplicate address detection: a VIP is not announced from this
		// link, and DAD would leave an IPv6 VIP tentative for seconds.
		Flags: unix.IFA_F_NODAD,
	}
	link, err := n.cachedLink(name)
	if err == nil {
		if err = fn(link, addr); errors.Is(err, syscall.ENODEV) {
			// The cached link is gone, perhaps replaced: once more with
			// the link the name has now.
			if link, err = n.link(name); err == nil {
				err = fn(link, addr)
			}
		}
	}
	if err != nil && !errors.Is(err, syscall.EEXIST) && !errors.Is(err, syscall.EADDRNOTAVAIL) {
		delete(n.links, name)
	}
	return addrErr(op, name, a, err)
}

// addrErr is the error of binding (op) or unbinding a on link name.
func addrErr(op, name string, a netip.Addr, err error) error {
	switch {
	case errors.Is(err, ErrNotFound):
		return fmt.Errorf("ipvs: %s %s: %w", op, a, err)
	case errors.Is(err, syscall.EEXIST):
		return fmt.Errorf("ipvs: %s %s on %s: %w: %w", op, a, name, ErrExists, err)
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return fmt.Errorf("ipvs: %s %s on %s: %w: %w", op, a, name, ErrNotFound, err)
	case err != nil:
		return fmt.Errorf("ipvs: %s %s on %s: %w", op, a, name, err)
	}
	return nil
}

// dumpErr marks vishvananda/netlink's ErrDumpInterrupted (a dump the
// kernel flagged NLM_F_DUMP_INTR, returned with partial results) as
// ErrInterrupted, which the dataplane retries.
func dumpErr(err error) error {
	if errors.Is(err, netlink.ErrDumpInterrupted) {
		return fmt.Errorf("%w: %w", ErrInterrupted, err)
	}
	return err
}
