package ipvs

import (
	"encoding/hex"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/switchyard-lb/switchyard/core/model"
)

// Firewall owns the dataplane's nftables table. Sync replaces its content
// with spec in one atomic transaction and records spec.Stamp and
// spec.Owned in it; Update changes only the elements a FirewallDelta
// names; RecordOwned changes the owned keys alone; Load reads the stamp,
// the owned keys and the element sets back, so that a restarted
// Dataplane knows whether the table needs writing and which services on
// shared addresses it owns, and a periodic resync finds elements someone
// else removed or added.
type Firewall interface {
	Sync(spec FirewallSpec) error
	// Update adds and removes the delta's elements and records its To
	// stamp, in one atomic transaction, when the table holds the spec
	// stamped From as far as this Firewall knows (it wrote it or Load
	// read it); otherwise, or when the kernel refuses, it fails and
	// changes nothing, and the caller Syncs the whole spec.
	Update(delta FirewallDelta) error
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

// UntouchedFirewall is a Firewall that can tell cheaply that its table is
// as it last left it: a periodic resync then skips Load, which reads
// every element (ten per Service), and still reads the table whole when
// anything may have changed it.
type UntouchedFirewall interface {
	Firewall
	// Untouched reports whether nothing can have changed the table since
	// the Firewall's last successful transaction or Load; false when it
	// cannot tell.
	Untouched() bool
}

// FirewallDelta is a change of a spec's element sets: ClusterIPs,
// ExternalIPs, NodePorts, Endpoints and Internal of Add join the table,
// those of Remove leave it (an internal mark that changes is in both).
// Its other fields are unused.
type FirewallDelta struct {
	From, To    string // the stamps before and after
	Add, Remove FirewallSpec
}

// FirewallState is what a programmed table records about itself.
type FirewallState struct {
	// Stamp is the Stamp of the spec the table was programmed from.
	Stamp string
	// Owned are the spec's Owned keys, sorted.
	Owned []model.VirtualServiceKey
	// Internal are the spec's Internal marks, sorted by key.
	Internal []InternalMark
	// Content are the element sets the table holds (ClusterIPs,
	// ExternalIPs, NodePorts, Endpoints), sorted, whatever its stamp
	// says: someone may have changed them since.
	Content FirewallSpec
}

// holds reports whether the table's element sets are spec's: false when
// someone added or removed an element since it was written.
func (st FirewallState) holds(spec FirewallSpec) bool {
	c := st.Content
	return slices.Equal(c.ClusterIPs, spec.ClusterIPs) && slices.Equal(c.ExternalIPs, spec.ExternalIPs) &&
		slices.Equal(c.NodePorts, spec.NodePorts) && slices.Equal(c.Endpoints, spec.Endpoints) &&
		slices.Equal(st.Internal, spec.Internal)
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
// traffic from a ClusterIP source is masqueraded. v5: internal marks. v6:
// the stamp sums its elements' hashes (elementSum), so that it follows
// one changed element at the cost of one hash; local detection by
// interface, and per family.
const stampVersion = "switchyard-fw-v6"

// Stamp is a content hash of the spec (and the table layout version),
// Owned excepted: two specs with the same stamp program the same rules and
// sets, and may differ only in the owned keys, which RecordOwned keeps up
// to date without a rewrite. The element sets enter it as a multiset
// hash, which the dataplane keeps up to date as elements come and go
// rather than hashing up to hundreds of thousands of endpoints each time.
func (s FirewallSpec) Stamp() string {
	var sum elementSum
	for e := range s.elements {
		sum.add(e.encode(), 1)
	}
	for _, r := range s.SourceRanges {
		sum.add(sourceRangeBytes(r.Key, r.Ranges), 1)
	}
	return stampOf(s.Local, s.MasqueradeAll, sum)
}

func hexString(b []byte) string { return hex.EncodeToString(b) }

// SourceRange lists the only client prefixes a virtual service accepts.
type SourceRange struct {
	Key    model.VirtualServiceKey
	Ranges []netip.Prefix
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
	x := newFWIndex()
	for k, ds := range want.Services {
		x.service(k, ds, masqueradeAll, 1)
	}
	return x.spec(local, masqueradeAll)
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
