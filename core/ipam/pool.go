package ipam

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
)

// Pool is an address pool as configured.
type Pool struct {
	Name string
	// Addresses are CIDRs or ranges "a-b", IPv4 or IPv6 (see ParseRange).
	// They must not overlap each other or another pool's.
	Addresses []string
	// AutoAssign lets Services that ask for no pool and no address get
	// addresses from this pool. A pool without it serves only Services
	// naming it (switchyard.dev/address-pool) or requesting one of its
	// addresses. core/config defaults it to true.
	AutoAssign bool
	// AvoidBuggyIPs keeps IPv4 addresses ending in .0 or .255 out of the
	// pool: they are neither handed out nor accepted when requested.
	AvoidBuggyIPs bool

	// Who may use the pool: a Service must satisfy all three; an empty
	// list allows everyone. Namespaces lists namespace names;
	// NamespaceSelectors match namespace labels and ServiceSelectors
	// Service labels, and one matching selector of a list is enough.
	Namespaces         []string
	NamespaceSelectors []Selector
	ServiceSelectors   []Selector
}

// Allows reports whether a Service of r may hold addresses of the pool.
func (p *Pool) Allows(r *Request) bool {
	if len(p.Namespaces) > 0 && !slices.Contains(p.Namespaces, r.Key.Namespace) {
		return false
	}
	return anyMatches(p.NamespaceSelectors, r.NamespaceLabels) && anyMatches(p.ServiceSelectors, r.Labels)
}

// pool is a validated pool with its allocation index.
type pool struct {
	Pool
	ranges []Range // sorted by First
	used4  usedSet
	used6  usedSet
	inUse  int // distinct addresses held by at least one Service
	total  uint64
}

func (p *pool) has(f Family) bool {
	return slices.ContainsFunc(p.ranges, func(r Range) bool { return r.Family() == f })
}

// contains reports whether the pool may hand out a.
func (p *pool) contains(a netip.Addr) bool {
	if p.AvoidBuggyIPs && buggy(a) {
		return false
	}
	for _, r := range p.ranges {
		if r.Contains(a) {
			return true
		}
	}
	return false
}

// firstFree returns the pool's lowest free address of family f.
func (p *pool) firstFree(f Family) (netip.Addr, bool) {
	for _, r := range p.ranges {
		if r.Family() != f {
			continue
		}
		if u, ok := p.set(f).firstFree(toU128(r.First), toU128(r.Last)); ok {
			return u.addr(f), true
		}
	}
	return netip.Addr{}, false
}

// set returns the index of the pool's addresses of family f.
func (p *pool) set(f Family) *usedSet {
	if f == IPv4 {
		return &p.used4
	}
	return &p.used6
}

// compilePools validates pools and builds their indexes.
func compilePools(cfg []Pool) ([]*pool, error) {
	out := make([]*pool, 0, len(cfg))
	type owned struct {
		r    Range
		pool string
	}
	var all []owned
	names := map[string]bool{}
	for _, c := range cfg {
		if c.Name == "" {
			return nil, fmt.Errorf("pool with addresses %v has no name", c.Addresses)
		}
		if names[c.Name] {
			return nil, fmt.Errorf("pool %q is defined twice", c.Name)
		}
		names[c.Name] = true
		if len(c.Addresses) == 0 {
			return nil, fmt.Errorf("pool %q has no addresses", c.Name)
		}
		for _, sels := range [][]Selector{c.NamespaceSelectors, c.ServiceSelectors} {
			for _, s := range sels {
				if err := s.Validate(); err != nil {
					return nil, fmt.Errorf("pool %q: %w", c.Name, err)
				}
			}
		}
		p := &pool{Pool: c, used4: usedSet{avoidBuggy: c.AvoidBuggyIPs}}
		p.Addresses = slices.Clone(c.Addresses)
		for _, s := range c.Addresses {
			r, err := ParseRange(s)
			if err != nil {
				return nil, fmt.Errorf("pool %q: %w", c.Name, err)
			}
			p.ranges = append(p.ranges, r)
			all = append(all, owned{r, c.Name})
			n := r.size(c.AvoidBuggyIPs)
			if p.total+n < p.total {
				p.total = math.MaxUint64
			} else {
				p.total += n
			}
		}
		slices.SortFunc(p.ranges, func(a, b Range) int { return a.First.Compare(b.First) })
		out = append(out, p)
	}
	slices.SortFunc(all, func(a, b owned) int { return a.r.First.Compare(b.r.First) })
	for i := 1; i < len(all); i++ {
		if prev, cur := all[i-1], all[i]; cur.r.First.Compare(prev.r.Last) <= 0 && cur.r.First.BitLen() == prev.r.Last.BitLen() {
			if prev.pool == cur.pool {
				return nil, fmt.Errorf("pool %q: %s overlaps %s", cur.pool, cur.r, prev.r)
			}
			return nil, fmt.Errorf("pool %q: %s overlaps %s of pool %q", cur.pool, cur.r, prev.r, prev.pool)
		}
	}
	return out, nil
}
