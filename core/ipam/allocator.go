package ipam

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/switchyard-lb/switchyard/core/model"
)

// Port is a port a Service serves on its LoadBalancer addresses. Two
// Services sharing an address must not use the same Port.
type Port struct {
	Port     uint16
	Protocol model.Protocol
}

func (p Port) String() string { return fmt.Sprintf("%s/%d", p.Protocol, p.Port) }

func (p Port) compare(o Port) int {
	return cmp.Or(cmp.Compare(p.Port, o.Port), cmp.Compare(p.Protocol, o.Protocol))
}

// Request is what the Allocator needs of one LoadBalancer Service.
type Request struct {
	Key model.ServiceKey
	// Labels are the Service's labels, NamespaceLabels its namespace's,
	// for the pools' selectors.
	Labels          map[string]string
	NamespaceLabels map[string]string

	// Pool is the switchyard.dev/address-pool annotation, "" when unset.
	Pool string
	// SharingKey is the switchyard.dev/allow-shared-ip annotation: two
	// Services may hold the same address only when both carry the same
	// non-empty key, the same BackendKey and no common Port.
	SharingKey string
	// BackendKey, when set, must be equal for Services sharing an
	// address. The controller sets it for externalTrafficPolicy Local
	// (for instance to the pod selector): layer-2 election then sees the
	// same local endpoints for every Service on the address.
	BackendKey string
	Ports      []Port

	// RequestedIPs are spec.loadBalancerIP and the
	// switchyard.dev/load-balancer-ips annotation: at most one address
	// per family. When set, they are exactly what the Service gets, or an
	// error.
	RequestedIPs []netip.Addr
	// Families are the families wanted, primary first (spec.ipFamilies).
	// Empty means the families of RequestedIPs, or IPv4 alone.
	Families []Family
	// PreferDualStack makes the second family optional (ipFamilyPolicy
	// PreferDualStack); otherwise every family in Families is required.
	PreferDualStack bool

	// Current is the Service's address as published
	// (status.loadBalancer.ingress). The Allocator keeps what it decided
	// itself over Current; Current matters after a restart (see Sync).
	Current []netip.Addr
}

// record is what a Service holds.
type record struct {
	ips                    []netip.Addr
	sharingKey, backendKey string
	ports                  []Port
}

// PoolStats are a pool's address counts, for metrics.
type PoolStats struct {
	Pool string
	// Total is the number of addresses the pool may hand out (avoided
	// ones excluded), saturating at math.MaxUint64 for huge IPv6 pools.
	Total uint64
	// Used is the number of distinct addresses held by Services.
	Used int
}

// Result is the outcome of one request in Sync.
type Result struct {
	Key model.ServiceKey
	// IPs are the addresses the Service holds, in the order of its
	// Families; on error, those it keeps (possibly none).
	IPs []netip.Addr
	Err error
}

// Allocator decides the LoadBalancer addresses of Services. It is safe
// for concurrent use, though a controller normally drives it from one
// goroutine and only metrics read Stats concurrently.
type Allocator struct {
	mu      sync.Mutex
	pools   []*pool // in configuration order: the auto-assign preference
	byName  map[string]*pool
	records map[model.ServiceKey]*record
	users   map[netip.Addr][]model.ServiceKey // sorted
	shared  map[string]map[netip.Addr]int     // sharing key -> address -> holders
}

// New returns an Allocator over pools, holding no assignment.
func New(pools []Pool) (*Allocator, error) {
	a := &Allocator{
		records: map[model.ServiceKey]*record{},
		users:   map[netip.Addr][]model.ServiceKey{},
		shared:  map[string]map[netip.Addr]int{},
	}
	if _, err := a.SetPools(pools); err != nil {
		return nil, err
	}
	return a, nil
}

// SetPools replaces the pools (a configuration reload). On error nothing
// changes. Addresses no longer in any pool are taken from their Services,
// whose keys are returned sorted: the caller allocates them again.
// Everything else is kept, even where a pool's selectors or auto-assign
// changed; Allocate revisits those per Service.
func (a *Allocator) SetPools(cfg []Pool) ([]model.ServiceKey, error) {
	pools, err := compilePools(cfg)
	if err != nil {
		return nil, fmt.Errorf("set address pools: %w", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	old := a.records
	a.pools = pools
	a.byName = make(map[string]*pool, len(pools))
	for _, p := range pools {
		a.byName[p.Name] = p
	}
	a.records = map[model.ServiceKey]*record{}
	a.users = map[netip.Addr][]model.ServiceKey{}
	a.shared = map[string]map[netip.Addr]int{}
	var lost []model.ServiceKey
	for _, k := range sortedKeys(old) {
		rec := old[k]
		n := len(rec.ips)
		rec.ips = slices.DeleteFunc(rec.ips, func(ip netip.Addr) bool { return a.poolOf(ip) == nil })
		if len(rec.ips) != n {
			lost = append(lost, k)
		}
		a.assign(k, rec)
	}
	return lost, nil
}

// Allocate decides the addresses of the Service of r and records them.
// It keeps the Service's current addresses while they stay valid for r,
// adds one for each family still missing and releases the rest.
//
// On error the Service keeps only those of its current addresses that
// stay valid (none when r is invalid), Allocate returns them with the
// error, and nothing new is assigned.
func (a *Allocator) Allocate(r Request) ([]netip.Addr, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.allocate(r)
}

// Release frees the Service's addresses (Service deleted, or no longer
// of type LoadBalancer or of our class). It reports whether it held any.
func (a *Allocator) Release(key model.ServiceKey) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.unassign(key) != nil
}

// Assigned returns the Service's addresses, nil when it holds none.
func (a *Allocator) Assigned(key model.ServiceKey) []netip.Addr {
	a.mu.Lock()
	defer a.mu.Unlock()
	if rec := a.records[key]; rec != nil {
		return slices.Clone(rec.ips)
	}
	return nil
}

// Stats returns every pool's counts, in configuration order.
func (a *Allocator) Stats() []PoolStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]PoolStats, len(a.pools))
	for i, p := range a.pools {
		out[i] = PoolStats{Pool: p.Name, Total: p.total, Used: p.inUse}
	}
	return out
}

// Sync makes the Allocator hold exactly the Services of reqs, the
// complete set of LoadBalancer Services: it releases every other Service,
// then, in key order, lets each Service without a record claim the valid
// part of its Current addresses, and only then allocates: first the
// Services requesting addresses, then the others, each group in key order.
// Claiming first is what lets a new leader take over without renumbering:
// no Service is given an address another one already publishes. Results
// are sorted by key; for duplicate keys the last request counts.
func (a *Allocator) Sync(reqs []Request) []Result {
	a.mu.Lock()
	defer a.mu.Unlock()
	byKey := make(map[model.ServiceKey]Request, len(reqs))
	for _, r := range reqs {
		byKey[r.Key] = r
	}
	for _, k := range sortedKeys(a.records) {
		if _, ok := byKey[k]; !ok {
			a.unassign(k)
		}
	}
	keys := sortedKeys(byKey)
	for _, k := range keys {
		if a.records[k] != nil {
			continue
		}
		r, err := normalize(byKey[k])
		if err != nil {
			continue
		}
		a.assign(k, newRecord(&r, a.keep(&r, r.Current)))
	}
	// Services requesting addresses go before those taking any, so that
	// none of the latter takes an address the former ask for.
	requests := func(k model.ServiceKey) int { return min(len(byKey[k].RequestedIPs), 1) }
	slices.SortStableFunc(keys, func(x, y model.ServiceKey) int {
		return cmp.Compare(requests(y), requests(x))
	})
	out := make([]Result, 0, len(keys))
	for _, k := range keys {
		ips, err := a.allocate(byKey[k])
		out = append(out, Result{Key: k, IPs: ips, Err: err})
	}
	slices.SortFunc(out, func(x, y Result) int { return x.Key.Compare(y.Key) })
	return out
}

func (a *Allocator) allocate(r Request) ([]netip.Addr, error) {
	old := a.unassign(r.Key)
	current := r.Current
	if old != nil {
		current = old.ips
	}
	r, err := normalize(r)
	if err != nil {
		return nil, fmt.Errorf("allocate addresses for %s: %w", r.Key, err)
	}
	ips, err := a.decide(&r, current)
	a.assign(r.Key, newRecord(&r, ips))
	if err != nil {
		return ips, fmt.Errorf("allocate addresses for %s: %w", r.Key, err)
	}
	return ips, nil
}

// decide returns the addresses the Service of r should hold, given its
// current ones; the Service holds nothing while decide runs.
func (a *Allocator) decide(r *Request, current []netip.Addr) ([]netip.Addr, error) {
	kept := a.keep(r, current)
	if len(r.RequestedIPs) > 0 {
		for _, ip := range r.RequestedIPs {
			if err := a.valid(ip, r); err != nil {
				return kept, err
			}
		}
		return r.order(r.RequestedIPs), nil
	}

	var missing []Family
	for _, f := range r.Families {
		if !slices.ContainsFunc(kept, func(ip netip.Addr) bool { return FamilyOf(ip) == f }) {
			missing = append(missing, f)
		}
	}
	if len(missing) == 0 {
		return kept, nil
	}
	cands, err := a.candidates(r, kept)
	if err != nil {
		if r.PreferDualStack && len(kept) > 0 {
			return kept, nil // the missing family is optional
		}
		return kept, err
	}
	// First choice: one pool serving every missing family.
	for _, p := range cands {
		if got, ok := a.pickAll(p, missing, r); ok {
			return r.order(append(kept, got...)), nil
		}
	}
	// Then: each family from the first pool that has one free.
	got := slices.Clone(kept)
	var failed []Family
	for _, f := range missing {
		found := false
		for _, p := range cands {
			if ip, ok := a.pick(p, f, r); ok {
				got, found = append(got, ip), true
				break
			}
		}
		if !found {
			failed = append(failed, f)
		}
	}
	if len(failed) == 0 || (r.PreferDualStack && len(got) > 0) {
		return r.order(got), nil
	}
	f := failed[0]
	var names []string
	for _, p := range cands {
		if p.has(f) {
			names = append(names, p.Name)
		}
	}
	if len(names) == 0 {
		return kept, fmt.Errorf("%w: no pool usable by the Service has %s addresses", ErrNoPool, f)
	}
	return kept, fmt.Errorf("%w: no free %s address in pool %s", ErrPoolExhausted, f, strings.Join(names, ", "))
}

// candidates returns the pools a Service may get new addresses from, in
// preference order: the pool it names, or the auto-assign pools allowing
// it, with the pool of an address it keeps first.
func (a *Allocator) candidates(r *Request, kept []netip.Addr) ([]*pool, error) {
	if r.Pool != "" {
		p := a.byName[r.Pool]
		if p == nil {
			return nil, fmt.Errorf("%w: pool %q does not exist", ErrNoPool, r.Pool)
		}
		if !p.Allows(r) {
			return nil, fmt.Errorf("%w: pool %q does not allow the Service", ErrNoPool, r.Pool)
		}
		return []*pool{p}, nil
	}
	var out []*pool
	for _, ip := range kept {
		out = append(out, a.poolOf(ip))
	}
	for _, p := range a.pools {
		if p.AutoAssign && p.Allows(r) && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no auto-assign pool allows the Service (name one with the address-pool annotation)", ErrNoPool)
	}
	return out, nil
}

// pickAll picks an address of every family in fs from p.
func (a *Allocator) pickAll(p *pool, fs []Family, r *Request) ([]netip.Addr, bool) {
	var out []netip.Addr
	for _, f := range fs {
		ip, ok := a.pick(p, f, r)
		if !ok {
			return nil, false
		}
		out = append(out, ip)
	}
	return out, true
}

// pick returns the address of family f in p that the Service should get:
// the lowest one it can share with Services of its sharing key, else the
// lowest free one.
func (a *Allocator) pick(p *pool, f Family, r *Request) (netip.Addr, bool) {
	if !p.has(f) {
		return netip.Addr{}, false
	}
	if r.SharingKey != "" {
		var best netip.Addr
		for ip := range a.shared[r.SharingKey] {
			if FamilyOf(ip) == f && (!best.IsValid() || ip.Less(best)) && p.contains(ip) && a.compatible(ip, r) == nil {
				best = ip
			}
		}
		if best.IsValid() {
			return best, true
		}
	}
	return p.firstFree(f)
}

// keep returns the addresses of current the Service of r may go on
// holding: one per wanted family, valid, and requested when r requests.
func (a *Allocator) keep(r *Request, current []netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, ip := range current {
		f := FamilyOf(ip)
		if !ip.IsValid() || !slices.Contains(r.Families, f) ||
			slices.ContainsFunc(out, func(o netip.Addr) bool { return FamilyOf(o) == f }) ||
			(len(r.RequestedIPs) > 0 && !slices.Contains(r.RequestedIPs, ip)) ||
			a.valid(ip, r) != nil {
			continue
		}
		out = append(out, ip)
	}
	return r.order(out)
}

// valid checks that the Service of r may hold ip.
func (a *Allocator) valid(ip netip.Addr, r *Request) error {
	p := a.poolOf(ip)
	if p == nil {
		for _, q := range a.pools {
			if q.AvoidBuggyIPs && slices.ContainsFunc(q.ranges, func(rg Range) bool { return rg.Contains(ip) }) {
				return fmt.Errorf("%w: %s ends in .0 or .255, which pool %q avoids", ErrNoPool, ip, q.Name)
			}
		}
		return fmt.Errorf("%w: %s is outside every pool", ErrNoPool, ip)
	}
	if r.Pool != "" && p.Name != r.Pool {
		return fmt.Errorf("%w: %s is in pool %q, not in the requested pool %q", ErrNoPool, ip, p.Name, r.Pool)
	}
	if !p.Allows(r) {
		return fmt.Errorf("%w: pool %q of %s does not allow the Service", ErrNoPool, p.Name, ip)
	}
	return a.compatible(ip, r)
}

// compatible checks that every holder of ip shares it with r.
func (a *Allocator) compatible(ip netip.Addr, r *Request) error {
	for _, k := range a.users[ip] {
		o := a.records[k]
		switch {
		case r.SharingKey == "" || o.sharingKey != r.SharingKey:
			return fmt.Errorf("%w: %s is held by %s, sharing key %q (this Service: %q)", ErrConflict, ip, k, o.sharingKey, r.SharingKey)
		case o.backendKey != r.BackendKey:
			return fmt.Errorf("%w: %s is held by %s with another backend (%q, this Service: %q)", ErrConflict, ip, k, o.backendKey, r.BackendKey)
		}
		for _, p := range r.Ports {
			if _, clash := slices.BinarySearchFunc(o.ports, p, Port.compare); clash {
				return fmt.Errorf("%w: port %s of %s is used by %s", ErrConflict, p, ip, k)
			}
		}
	}
	return nil
}

// poolOf returns the pool that may hand out ip, or nil.
func (a *Allocator) poolOf(ip netip.Addr) *pool {
	for _, p := range a.pools {
		if p.contains(ip) {
			return p
		}
	}
	return nil
}

func newRecord(r *Request, ips []netip.Addr) *record {
	return &record{ips: ips, sharingKey: r.SharingKey, backendKey: r.BackendKey, ports: r.Ports}
}

// assign records rec for key; an empty rec records nothing.
func (a *Allocator) assign(key model.ServiceKey, rec *record) {
	if len(rec.ips) == 0 {
		return
	}
	a.records[key] = rec
	for _, ip := range rec.ips {
		us := a.users[ip]
		if len(us) == 0 {
			p := a.poolOf(ip)
			p.set(FamilyOf(ip)).add(toU128(ip))
			p.inUse++
		}
		i, _ := slices.BinarySearchFunc(us, key, model.ServiceKey.Compare)
		a.users[ip] = slices.Insert(us, i, key)
		if rec.sharingKey != "" {
			if a.shared[rec.sharingKey] == nil {
				a.shared[rec.sharingKey] = map[netip.Addr]int{}
			}
			a.shared[rec.sharingKey][ip]++
		}
	}
}

// unassign forgets key's record and returns it.
func (a *Allocator) unassign(key model.ServiceKey) *record {
	rec := a.records[key]
	if rec == nil {
		return nil
	}
	delete(a.records, key)
	for _, ip := range rec.ips {
		us := slices.DeleteFunc(a.users[ip], func(k model.ServiceKey) bool { return k == key })
		if len(us) == 0 {
			delete(a.users, ip)
			p := a.poolOf(ip)
			p.set(FamilyOf(ip)).remove(toU128(ip))
			p.inUse--
		} else {
			a.users[ip] = us
		}
		if rec.sharingKey != "" {
			if m := a.shared[rec.sharingKey]; m[ip] <= 1 {
				delete(m, ip)
				if len(m) == 0 {
					delete(a.shared, rec.sharingKey)
				}
			} else {
				m[ip]--
			}
		}
	}
	return rec
}

// normalize copies r with sorted, deduplicated ports and defaulted
// families, and checks that it is coherent.
func normalize(r Request) (Request, error) {
	r.Ports = slices.Clone(r.Ports)
	slices.SortFunc(r.Ports, Port.compare)
	r.Ports = slices.Compact(r.Ports)
	if len(r.Families) == 0 {
		for _, ip := range r.RequestedIPs {
			r.Families = append(r.Families, FamilyOf(ip))
		}
		if len(r.Families) == 0 {
			r.Families = []Family{IPv4}
		}
	}
	if len(r.Families) > 2 || (len(r.Families) == 2 && r.Families[0] == r.Families[1]) {
		return r, fmt.Errorf("%w: families %v: want one family or two different ones", ErrInvalidRequest, r.Families)
	}
	for _, f := range r.Families {
		if f != IPv4 && f != IPv6 {
			return r, fmt.Errorf("%w: unknown family %v", ErrInvalidRequest, f)
		}
	}
	seen := map[Family]netip.Addr{}
	for _, ip := range r.RequestedIPs {
		switch {
		case !ip.IsValid():
			return r, fmt.Errorf("%w: requested address is empty", ErrInvalidRequest)
		case ip.Zone() != "" || ip.Is4In6():
			return r, fmt.Errorf("%w: requested address %s is zoned or IPv4-mapped", ErrInvalidRequest, ip)
		}
		f := FamilyOf(ip)
		if prev, ok := seen[f]; ok && prev != ip {
			return r, fmt.Errorf("%w: requested %s and %s: at most one %s address", ErrInvalidRequest, prev, ip, f)
		}
		seen[f] = ip
		if !slices.Contains(r.Families, f) {
			return r, fmt.Errorf("%w: requested %s but the Service's families are %v", ErrInvalidRequest, ip, r.Families)
		}
	}
	if len(r.RequestedIPs) > 0 {
		r.RequestedIPs = nil
		for _, f := range r.Families {
			if ip, ok := seen[f]; ok {
				r.RequestedIPs = append(r.RequestedIPs, ip)
			} else if !r.PreferDualStack {
				return r, fmt.Errorf("%w: the Service requires %s but requests no %s address", ErrInvalidRequest, f, f)
			}
		}
	}
	return r, nil
}

// order sorts ips (one per family) in the order of r's families.
func (r *Request) order(ips []netip.Addr) []netip.Addr {
	slices.SortFunc(ips, func(x, y netip.Addr) int {
		return cmp.Compare(slices.Index(r.Families, FamilyOf(x)), slices.Index(r.Families, FamilyOf(y)))
	})
	return ips
}

func sortedKeys[V any](m map[model.ServiceKey]V) []model.ServiceKey {
	keys := make([]model.ServiceKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, model.ServiceKey.Compare)
	return keys
}

// RequestFor fills a Request with what the model's Service carries: key,
// pool and sharing annotations, ports, requested and published
// addresses. The caller adds what the model does not hold: labels,
// families and the backend key.
func RequestFor(s *model.Service) Request {
	r := Request{
		Key:          s.Key,
		Pool:         s.AddressPool,
		SharingKey:   s.SharingKey,
		RequestedIPs: slices.Clone(s.RequestedIPs),
		Current:      slices.Clone(s.LoadBalancerIPs),
	}
	for _, p := range s.Ports {
		r.Ports = append(r.Ports, Port{Port: p.Port, Protocol: p.Protocol})
	}
	return r
}
