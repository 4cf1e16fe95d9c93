package ipvs

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/switchyard-lb/switchyard/core/model"
)

// Firewall owns the dataplane's nftables table. Sync replaces its content
// with spec in one atomic transaction and records spec.Stamp and
// spec.Owned in it; RecordOwned changes the owned keys alone; Load reads
// the stamp and the owned keys back, so that a restarted Dataplane knows
// whether the table needs writing and which services on shared addresses
// it owns.
type Firewall interface {
	Sync(spec FirewallSpec) error
	// RecordOwned adds add to the owned keys and removes drop from them,
	// in one atomic transaction that changes nothing else (the stamp does
	// not cover the owned keys). It fails, with an error wrapping
	// ErrNotFound, when there is no table or drop holds a key the table
	// does not; adding a key the table holds is no error.
	RecordOwned(add, drop []model.VirtualServiceKey) error
	// Load returns what the table records; the zero FirewallState when
	// there is no table.
	Load() (FirewallState, error)
}

// FirewallState is what a programmed table records about itself.
type FirewallState struct {
	// Stamp is the Stamp of the spec the table was programmed from.
	Stamp string
	// Owned are the spec's Owned keys, sorted.
	Owned []model.VirtualServiceKey
	// Internal are the spec's Internal marks, sorted by key.
	Internal []InternalMark
}

// FirewallSpec is what the nftables table implements: masquerade for
// traffic to service addresses that would otherwise not come back through
// this node.
type FirewallSpec struct {
	// ClusterIPs are masqueraded when the client is not one of this
	// node's pods as Local tells them (a hostNetwork client, another
	// host), or always with MasqueradeAll. For a family Local has no
	// match for, only the node's own traffic is, which has a ClusterIP
	// as its source address.
	ClusterIPs []netip.Addr
	// ExternalIPs are LoadBalancer and external addresses with
	// externalTrafficPolicy Cluster: always masqueraded. Local ones keep
	// the client's address and are in neither list unless MasqueradeAll.
	ExternalIPs []netip.Addr
	// NodePorts are NodePort virtual services with externalTrafficPolicy
	// Cluster: always masqueraded. Sorted.
	NodePorts []model.VirtualServiceKey
	// Local tells this node's pods from other clients.
	Local         LocalDetector
	MasqueradeAll bool
	// SourceRanges drop traffic to a virtual service from other sources
	// (loadBalancerSourceRanges). Sorted by key.
	SourceRanges []SourceRange
	// Endpoints are every real server address of the wanted services:
	// a connection from one of them forwarded to itself (a pod reaching
	// itself through its Service) is masqueraded, or its reply would skip
	// IPVS (hairpin). Sorted.
	Endpoints []netip.Addr
	// Internal are the Local frontends whose in-cluster traffic (from
	// the node itself; from pods, told by Local) is marked for
	// their firewall-mark service, which holds every endpoint; the node's
	// own is masqueraded too (its source may be the frontend's address,
	// which every node holds), pods' is not. Sorted by key.
	Internal []InternalMark
	// Owned are the virtual services the dataplane owns on addresses not
	// bound to the dummy link (NodePorts on node addresses). The table
	// only stores them, so that ownership survives a restart: a journal
	// that RecordOwned also writes, outside the stamp. Sorted.
	Owned []model.VirtualServiceKey
}

// stampVersion changes whenever the table layout for a given spec, or
// what the stamp covers, does, so that an upgraded daemon rewrites the
// table. v3: the stamp no longer covers Owned. v4: without cluster CIDRs,
// traffic from a ClusterIP source is masqueraded. v5: internal marks.
// v6: local detection by interface, and per family.
const stampVersion = "switchyard-fw-v6"

// Stamp is a content hash of the spec (and the table layout version),
// Owned excepted: two specs with the same stamp program the same rules and
// sets, and may differ only in the owned keys, which RecordOwned keeps up
// to date without a rewrite. It hashes a binary encoding, as specs hold up
// to hundreds of thousands of endpoints.
func (s FirewallSpec) Stamp() string {
	b := []byte(stampVersion)
	addr := func(a netip.Addr) {
		b, _ = a.AppendBinary(b) // 0, 4 or 16 bytes, then the size
		b = append(b, byte(a.BitLen()/8))
	}
	addrs := func(as []netip.Addr) {
		b = binary.BigEndian.AppendUint32(b, uint32(len(as)))
		for _, a := range as {
			addr(a)
		}
	}
	keys := func(ks []model.VirtualServiceKey) {
		b = binary.BigEndian.AppendUint32(b, uint32(len(ks)))
		for _, k := range ks {
			addr(k.Addr)
			b = append(b, byte(k.Protocol), byte(k.Port>>8), byte(k.Port))
		}
	}
	prefixes := func(ps []netip.Prefix) {
		b = binary.BigEndian.AppendUint32(b, uint32(len(ps)))
		for _, p := range ps {
			addr(p.Addr())
			b = append(b, byte(p.Bits()))
		}
	}
	addrs(s.ClusterIPs)
	addrs(s.ExternalIPs)
	keys(s.NodePorts)
	prefixes(s.Local.CIDRs)
	for _, name := range []string{s.Local.Interface, s.Local.InterfacePrefix} {
		b = binary.BigEndian.AppendUint32(b, uint32(len(name)))
		b = append(b, name...)
	}
	if s.MasqueradeAll {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(s.SourceRanges)))
	for _, r := range s.SourceRanges {
		keys([]model.VirtualServiceKey{r.Key})
		prefixes(r.Ranges)
	}
	addrs(s.Endpoints)
	b = binary.BigEndian.AppendUint32(b, uint32(len(s.Internal)))
	for _, im := range s.Internal {
		keys([]model.VirtualServiceKey{im.Key})
		b = binary.BigEndian.AppendUint32(b, im.Mark)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// SourceRange lists the only client prefixes a virtual service accepts.
type SourceRange struct {
	Key    model.VirtualServiceKey
	Ranges []netip.Prefix
}

// Equal reports whether two specs program the same table.
func (s FirewallSpec) Equal(o FirewallSpec) bool {
	return slices.Equal(s.ClusterIPs, o.ClusterIPs) && slices.Equal(s.ExternalIPs, o.ExternalIPs) &&
		slices.Equal(s.NodePorts, o.NodePorts) &&
		s.Local.Equal(o.Local) && s.MasqueradeAll == o.MasqueradeAll &&
		slices.EqualFunc(s.SourceRanges, o.SourceRanges, func(a, b SourceRange) bool {
			return a.Key == b.Key && slices.Equal(a.Ranges, b.Ranges)
		}) &&
		slices.Equal(s.Endpoints, o.Endpoints) && slices.Equal(s.Owned, o.Owned) &&
		slices.Equal(s.Internal, o.Internal)
}

// LocalDetector tells packets from this node's pods from other packets,
// as kube-proxy's local traffic detectors (--detect-local-mode): by
// source prefix (ClusterCIDR, NodeCIDR), by the interface a packet came
// in on (BridgeInterface), or by that interface's name prefix
// (InterfaceNamePrefix). Interfaces are matched by name, so a bridge that
// does not exist yet (cni0 before the first pod) matches once it does;
// the node's own packets come in on none and are never local. The zero
// value tells nothing.
type LocalDetector struct {
	CIDRs           []netip.Prefix
	Interface       string
	InterfacePrefix string
}

// LocalMatch is one test that makes a packet local: its source is in
// Source, or it came in on the interface named Interface, or, with
// NamePrefix, on one whose name starts with Interface.
type LocalMatch struct {
	Source     netip.Prefix
	Interface  string
	NamePrefix bool
}

// Matches returns the tests for packets of one family (IPv4 when v4): a
// packet that passes any is local. None: the detector tells nothing for
// that family.
func (l LocalDetector) Matches(v4 bool) []LocalMatch {
	var out []LocalMatch
	for _, p := range l.CIDRs {
		if p.Addr().Is4() == v4 {
			out = append(out, LocalMatch{Source: p.Masked()})
		}
	}
	if l.Interface != "" {
		out = append(out, LocalMatch{Interface: l.Interface})
	}
	if l.InterfacePrefix != "" {
		out = append(out, LocalMatch{Interface: l.InterfacePrefix, NamePrefix: true})
	}
	return out
}

// Validate refuses interface names the kernel cannot hold (IFNAMSIZ, its
// terminating NUL included).
func (l LocalDetector) Validate() error {
	for _, name := range []string{l.Interface, l.InterfacePrefix} {
		if len(name) >= 16 {
			return fmt.Errorf("local interface %q is longer than 15 bytes", name)
		}
	}
	return nil
}

// Equal reports whether two detectors tell the same packets apart.
func (l LocalDetector) Equal(o LocalDetector) bool {
	return slices.Equal(l.CIDRs, o.CIDRs) && l.Interface == o.Interface && l.InterfacePrefix == o.InterfacePrefix
}

// BuildFirewallSpec derives the spec from the desired virtual services;
// Owned is left to the caller. An address with both a Local and a Cluster
// external frontend is masqueraded (the set is keyed by address only).
func BuildFirewallSpec(want Desired, local LocalDetector, masqueradeAll bool) FirewallSpec {
	cluster, external, endpoints := map[netip.Addr]bool{}, map[netip.Addr]bool{}, map[netip.Addr]bool{}
	local.CIDRs = slices.Clone(local.CIDRs)
	spec := FirewallSpec{Local: local, MasqueradeAll: masqueradeAll}
	for k, ds := range want.Services {
		for _, d := range ds.Destinations {
			endpoints[d.Addr] = true
		}
		if ds.For.Addr.IsValid() {
			m, _ := MarkOf(k)
			spec.Internal = append(spec.Internal, InternalMark{Key: ds.For, Mark: m})
			continue
		}
		a := ds.Service.Addr
		switch {
		case ds.Kind == model.FrontendClusterIP:
			cluster[a] = true
		case ds.Local && !masqueradeAll:
		case ds.Kind == model.FrontendNodePort:
			spec.NodePorts = append(spec.NodePorts, k)
		default:
			external[a] = true
		}
		if len(ds.SourceRanges) > 0 {
			spec.SourceRanges = append(spec.SourceRanges, SourceRange{Key: k, Ranges: slices.Clone(ds.SourceRanges)})
		}
	}
	for a := range cluster {
		if !external[a] {
			spec.ClusterIPs = append(spec.ClusterIPs, a)
		}
	}
	for a := range external {
		spec.ExternalIPs = append(spec.ExternalIPs, a)
	}
	spec.Endpoints = slices.SortedFunc(maps.Keys(endpoints), netip.Addr.Compare)
	slices.SortFunc(spec.ClusterIPs, netip.Addr.Compare)
	slices.SortFunc(spec.ExternalIPs, netip.Addr.Compare)
	slices.SortFunc(spec.NodePorts, model.VirtualServiceKey.Compare)
	slices.SortFunc(spec.SourceRanges, func(a, b SourceRange) int { return a.Key.Compare(b.Key) })
	slices.SortFunc(spec.Internal, func(a, b InternalMark) int { return a.Key.Compare(b.Key) })
	return spec
}

// applyOwned returns the sorted keys of owned, with add and without drop.
func applyOwned(owned, add, drop []model.VirtualServiceKey) []model.VirtualServiceKey {
	set := make(map[model.VirtualServiceKey]bool, len(owned)+len(add))
	for _, k := range owned {
		set[k] = true
	}
	for _, k := range add {
		set[k] = true
	}
	for _, k := range drop {
		delete(set, k)
	}
	return slices.SortedFunc(maps.Keys(set), model.VirtualServiceKey.Compare)
}

// diffSorted returns what b has and a lacks, and what a has and b lacks;
// both are sorted by cmp and free of duplicates.
func diffSorted[T any](a, b []T, cmp func(T, T) int) (added, removed []T) {
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || (i < len(a) && cmp(a[i], b[j]) < 0):
			removed = append(removed, a[i])
			i++
		case i == len(a) || cmp(a[i], b[j]) > 0:
			added = append(added, b[j])
			j++
		default:
			i++
			j++
		}
	}
	return added, removed
}
