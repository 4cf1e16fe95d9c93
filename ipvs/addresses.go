package ipvs

import "net/netip"

// Addresses is the dummy interface that holds the dataplane's virtual IPs:
// the kernel delivers traffic for an address locally (where IPVS takes it)
// only when some interface holds it. Implementations are safe for
// concurrent use.
type Addresses interface {
	// EnsureDummy creates the dummy link name if it is missing and leaves
	// it down. It fails if name exists and is not a dummy link.
	EnsureDummy(name string) error
	// Addrs lists the addresses on link name, sorted.
	Addrs(name string) ([]netip.Addr, error)
	// AddAddr binds a as a /32 or /128 host address to link name.
	AddAddr(name string, a netip.Addr) error
	// DelAddr unbinds a from link name.
	DelAddr(name string, a netip.Addr) error
}

// AddressBatcher is Addresses that binds and unbinds several addresses per
// round trip with the kernel. Each returns one error per address, nil
// where it took effect, as AddAddr's and DelAddr's (ErrExists,
// ErrNotFound); a failed address does not stop the others.
type AddressBatcher interface {
	AddAddrs(name string, addrs []netip.Addr) []error
	DelAddrs(name string, addrs []netip.Addr) []error
}
