package ipvs

import (
	"crypto/sha256"
	"encoding/binary"
	"maps"
	"net/netip"
	"slices"

	"github.com/switchyard-lb/switchyard/core/model"
)

// The element kinds of a FirewallSpec, as its stamp hashes them.
const (
	elemClusterIP byte = iota + 1
	elemExternalIP
	elemNodePort
	elemEndpoint
	elemInternal
	elemSourceRange
)

// element is one member of a FirewallSpec's element sets: an address
// (cluster, external, endpoint), a key (NodePort) or a key and its mark
// (internal).
type element struct {
	kind byte
	addr netip.Addr
	key  model.VirtualServiceKey
	mark uint32
}

// elementSum is a multiset hash: the lane-wise sum of the SHA-256 of each
// member. Adding and removing a member costs one hash whatever the size
// of the set, and equal sets sum alike in any order.
type elementSum [4]uint64

func (s *elementSum) add(b []byte, sign int) {
	h := sha256.Sum256(b)
	for i := range s {
		v := binary.BigEndian.Uint64(h[8*i:])
		if sign > 0 {
			s[i] += v
		} else {
			s[i] -= v
		}
	}
}

func (e element) encode() []byte {
	b := []byte{e.kind}
	switch e.kind {
	case elemNodePort, elemInternal:
		b = appendKey(b, e.key)
		b = binary.BigEndian.AppendUint32(b, e.mark)
	default:
		b = appendAddr(b, e.addr)
	}
	return b
}

func appendAddr(b []byte, a netip.Addr) []byte {
	b, _ = a.AppendBinary(b) // 0, 4 or 16 bytes, then the size
	return append(b, byte(a.BitLen()/8))
}

func appendKey(b []byte, k model.VirtualServiceKey) []byte {
	b = appendAddr(b, k.Addr)
	return append(b, byte(k.Protocol), byte(k.Port>>8), byte(k.Port))
}

func sourceRangeBytes(k model.VirtualServiceKey, ranges []netip.Prefix) []byte {
	b := appendKey([]byte{elemSourceRange}, k)
	for _, p := range ranges {
		b = appendAddr(b, p.Addr())
		b = append(b, byte(p.Bits()))
	}
	return b
}

// stampOf is the stamp of a spec's rules (the local detector,
// masquerade-all) and of the sum of its elements.
func stampOf(local LocalDetector, masqueradeAll bool, sum elementSum) string {
	b := []byte(stampVersion)
	b = binary.BigEndian.AppendUint32(b, uint32(len(local.CIDRs)))
	for _, p := range local.CIDRs {
		b = appendAddr(b, p.Addr())
		b = append(b, byte(p.Bits()))
	}
	for _, name := range []string{local.Interface, local.InterfacePrefix} {
		b = binary.BigEndian.AppendUint32(b, uint32(len(name)))
		b = append(b, name...)
	}
	if masqueradeAll {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	for _, v := range sum {
		b = binary.BigEndian.AppendUint64(b, v)
	}
	h := sha256.Sum256(b)
	return hexString(h[:])
}

// elements yields spec's element-set members (Owned excepted), without
// gathering them: a spec of 10,000 Services has over 100,000.
func (s FirewallSpec) elements(yield func(element) bool) {
	for _, a := range s.ClusterIPs {
		if !yield(element{kind: elemClusterIP, addr: a}) {
			return
		}
	}
	for _, a := range s.ExternalIPs {
		if !yield(element{kind: elemExternalIP, addr: a}) {
			return
		}
	}
	for _, k := range s.NodePorts {
		if !yield(element{kind: elemNodePort, key: k}) {
			return
		}
	}
	for _, a := range s.Endpoints {
		if !yield(element{kind: elemEndpoint, addr: a}) {
			return
		}
	}
	for _, im := range s.Internal {
		if !yield(element{kind: elemInternal, key: im.Key, mark: im.Mark}) {
			return
		}
	}
}

// elementCount is how many members elements yields.
func (s FirewallSpec) elementCount() int {
	return len(s.ClusterIPs) + len(s.ExternalIPs) + len(s.NodePorts) + len(s.Endpoints) + len(s.Internal)
}

// fwIndex keeps the FirewallSpec of the desired state up to date as
// services come and go, by reference counts, so that a change of one
// Service costs in proportion to its own virtual services, not to the
// cluster. It also collects the element changes since the last flush,
// for Firewall.Update, and keeps the stamp's element sum.
type fwIndex struct {
	cluster, external, endpoints map[netip.Addr]int
	nodePorts                    map[model.VirtualServiceKey]bool
	internal                     map[model.VirtualServiceKey]uint32 // frontend: mark
	sourceRanges                 map[model.VirtualServiceKey][]netip.Prefix
	sum                          elementSum

	// pending are the members added (+1) or removed (-1) since the last
	// flush; rulesChanged is set when source ranges or the local
	// detector (Dataplane.SetLocalDetector) changed, which only a rewrite
	// applies.
	pending      map[element]int
	rulesChanged bool
	// whole is set while the table is to be written whole (the
	// dataplane knows no stamp of it): pending, which only an in-place
	// update reads, is then not kept (at a start, every element).
	whole bool
}

func newFWIndex() fwIndex {
	return fwIndex{
		cluster: map[netip.Addr]int{}, external: map[netip.Addr]int{}, endpoints: map[netip.Addr]int{},
		nodePorts: map[model.VirtualServiceKey]bool{}, internal: map[model.VirtualServiceKey]uint32{},
		sourceRanges: map[model.VirtualServiceKey][]netip.Prefix{}, pending: map[element]int{},
	}
}

// member records that e joined (sign 1) or left (-1) the spec.
func (x *fwIndex) member(e element, sign int) {
	x.sum.add(e.encode(), sign)
	if x.whole {
		return
	}
	if n := x.pending[e] + sign; n == 0 {
		delete(x.pending, e)
	} else {
		x.pending[e] = n
	}
}

// count changes a's count in m by sign and returns whether a was
// counted before and after.
func count(m map[netip.Addr]int, a netip.Addr, sign int) (was, is bool) {
	n := m[a]
	was = n > 0
	n += sign
	if n <= 0 {
		delete(m, a)
	} else {
		m[a] = n
	}
	return was, n > 0
}

// addrs changes the counts of a ClusterIP or external address; an
// address in both is external only.
func (x *fwIndex) addrs(a netip.Addr, external bool, sign int) {
	clusterWas, externalWas := x.cluster[a] > 0 && x.external[a] == 0, x.external[a] > 0
	if external {
		count(x.external, a, sign)
	} else {
		count(x.cluster, a, sign)
	}
	clusterIs, externalIs := x.cluster[a] > 0 && x.external[a] == 0, x.external[a] > 0
	if clusterWas != clusterIs {
		x.member(element{kind: elemClusterIP, addr: a}, boolSign(clusterIs))
	}
	if externalWas != externalIs {
		x.member(element{kind: elemExternalIP, addr: a}, boolSign(externalIs))
	}
}

func boolSign(in bool) int {
	if in {
		return 1
	}
	return -1
}

// service adds (sign 1) or removes (-1) the wanted service k, as
// the spec counts it.
func (x *fwIndex) service(k model.VirtualServiceKey, ds DesiredService, masqueradeAll bool, sign int) {
	for _, d := range ds.Destinations {
		if was, is := count(x.endpoints, d.Addr, sign); was != is {
			x.member(element{kind: elemEndpoint, addr: d.Addr}, sign)
		}
	}
	if ds.For.Addr.IsValid() {
		m, _ := MarkOf(k)
		e := element{kind: elemInternal, key: ds.For, mark: m}
		if sign > 0 {
			x.internal[ds.For] = m
		} else {
			delete(x.internal, ds.For)
		}
		x.member(e, sign)
		return
	}
	a := ds.Service.Addr
	switch {
	case ds.Kind == model.FrontendClusterIP:
		x.addrs(a, false, sign)
	case ds.Local && !masqueradeAll:
	case ds.Kind == model.FrontendNodePort:
		if sign > 0 {
			x.nodePorts[k] = true
		} else {
			delete(x.nodePorts, k)
		}
		x.member(element{kind: elemNodePort, key: k}, sign)
	default:
		x.addrs(a, true, sign)
	}
	if len(ds.SourceRanges) > 0 {
		x.sum.add(sourceRangeBytes(k, ds.SourceRanges), sign)
		if sign > 0 {
			x.sourceRanges[k] = ds.SourceRanges
		} else {
			delete(x.sourceRanges, k)
		}
		x.rulesChanged = true
	}
}

// spec returns the whole spec (Owned left to the caller), sorted: the
// BuildFirewallSpec of the desired state.
func (x *fwIndex) spec(local LocalDetector, masqueradeAll bool) FirewallSpec {
	local.CIDRs = slices.Clone(local.CIDRs)
	spec := FirewallSpec{Local: local, MasqueradeAll: masqueradeAll}
	for a := range x.cluster {
		if x.external[a] == 0 {
			spec.ClusterIPs = append(spec.ClusterIPs, a)
		}
	}
	spec.ExternalIPs = slices.Collect(maps.Keys(x.external))
	spec.NodePorts = slices.Collect(maps.Keys(x.nodePorts))
	spec.Endpoints = slices.Collect(maps.Keys(x.endpoints))
	for k, m := range x.internal {
		spec.Internal = append(spec.Internal, InternalMark{Key: k, Mark: m})
	}
	for k, r := range x.sourceRanges {
		spec.SourceRanges = append(spec.SourceRanges, SourceRange{Key: k, Ranges: slices.Clone(r)})
	}
	spec.sort()
	return spec
}

// stamp is the stamp of spec(local, masqueradeAll), without building it.
func (x *fwIndex) stamp(local LocalDetector, masqueradeAll bool) string {
	return stampOf(local, masqueradeAll, x.sum)
}

// delta returns the element changes since the last flush, sorted.
func (x *fwIndex) delta() (add, remove FirewallSpec) {
	for e, n := range x.pending {
		s := &add
		if n < 0 {
			s = &remove
		}
		switch e.kind {
		case elemClusterIP:
			s.ClusterIPs = append(s.ClusterIPs, e.addr)
		case elemExternalIP:
			s.ExternalIPs = append(s.ExternalIPs, e.addr)
		case elemNodePort:
			s.NodePorts = append(s.NodePorts, e.key)
		case elemEndpoint:
			s.Endpoints = append(s.Endpoints, e.addr)
		case elemInternal:
			s.Internal = append(s.Internal, InternalMark{Key: e.key, Mark: e.mark})
		}
	}
	add.sort()
	remove.sort()
	return add, remove
}

// flush forgets the changes collected so far: the table holds them. A
// new map, so that the first sync's (every element) is not kept.
func (x *fwIndex) flush() {
	x.pending = map[element]int{}
	x.rulesChanged = false
	x.whole = false
}

// sort sorts the spec's lists, as a FirewallSpec holds them.
func (s *FirewallSpec) sort() {
	slices.SortFunc(s.ClusterIPs, netip.Addr.Compare)
	slices.SortFunc(s.ExternalIPs, netip.Addr.Compare)
	slices.SortFunc(s.Endpoints, netip.Addr.Compare)
	slices.SortFunc(s.NodePorts, model.VirtualServiceKey.Compare)
	slices.SortFunc(s.SourceRanges, func(a, b SourceRange) int { return a.Key.Compare(b.Key) })
	slices.SortFunc(s.Internal, func(a, b InternalMark) int { return a.Key.Compare(b.Key) })
}
