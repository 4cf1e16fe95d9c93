package election

import (
	"bytes"
	"crypto/sha256"
	"net/netip"
	"slices"

	"github.com/switchyard-lb/switchyard/core/model"
)

// Candidate is a node that might announce a Service's address.
type Candidate struct {
	Name string
	// Ready is the Kubernetes NodeReady condition: the fallback when
	// membership does not know the node.
	Ready  bool
	Labels map[string]string
	// LocalEndpoint is set when a ready endpoint of the Service runs on
	// the node; it matters with externalTrafficPolicy Local.
	LocalEndpoint bool
}

// CandidateFrom builds a Candidate from a node of the model.
func CandidateFrom(n *model.Node, localEndpoint bool) Candidate {
	return Candidate{Name: n.Name, Ready: n.Ready, Labels: n.Labels, LocalEndpoint: localEndpoint}
}

// Matcher selects nodes by their labels (an announcer's node selector;
// ipam.Selector satisfies it).
type Matcher interface {
	Matches(labels map[string]string) bool
}

// AliveFunc reports what gossip membership knows of a node: known is
// false when membership has no opinion (not a member yet, membership
// disabled), and Kubernetes readiness decides instead.
type AliveFunc func(node string) (alive, known bool)

// Input is what election needs to decide for one announcer and one
// Service.
type Input struct {
	Nodes []Candidate
	// Selector is the announcer's node selector; nil selects every node.
	Selector Matcher
	// TrafficPolicy is the Service's externalTrafficPolicy: with Local,
	// only nodes with a local endpoint are eligible.
	TrafficPolicy model.TrafficPolicy
	// Alive, when set, takes precedence over Candidate.Ready for the
	// nodes it knows.
	Alive AliveFunc
}

// eligible reports whether c may announce.
func (in *Input) eligible(c *Candidate) bool {
	up := c.Ready
	if in.Alive != nil {
		if alive, known := in.Alive(c.Name); known {
			up = alive
		}
	}
	return up && (in.Selector == nil || in.Selector.Matches(c.Labels)) &&
		(in.TrafficPolicy != model.PolicyLocal || c.LocalEndpoint)
}

// Eligible returns the names of the eligible nodes, sorted, without
// duplicates.
func Eligible(in *Input) []string {
	out := in.eligibleNames()
	if len(out) == 0 {
		return nil
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// eligibleNames returns the names of the eligible nodes in input order.
func (in *Input) eligibleNames() []string {
	out := make([]string, 0, len(in.Nodes))
	for i := range in.Nodes {
		if in.eligible(&in.Nodes[i]) {
			out = append(out, in.Nodes[i].Name)
		}
	}
	return out
}

// BGPAnnouncers returns the nodes that announce the Service's addresses
// over BGP: every eligible node, sorted.
func BGPAnnouncers(in *Input) []string { return Eligible(in) }

// score is a node's rank for an address: lower wins.
// It runs for every eligible node and address in each election, so it
// hashes from a stack buffer instead of building strings.
func score(node string, ip netip.Addr) [sha256.Size]byte {
	var buf [128]byte
	b := append(buf[:0], node...)
	b = append(b, '#')
	return sha256.Sum256(ip.AppendTo(b))
}

// Layer2Owner returns the one node that answers ARP or NDP for ip: the
// eligible node with the lowest sha256(node + "#" + ip), ties going to
// the lower name. ok is false when no node is eligible: nobody announces.
func Layer2Owner(in *Input, ip netip.Addr) (owner string, ok bool) {
	return ownerAmong(in.eligibleNames(), ip)
}

// ownerAmong returns the node of eligible with the lowest score for ip,
// ties going to the lower name.
func ownerAmong(eligible []string, ip netip.Addr) (owner string, ok bool) {
	var best [sha256.Size]byte
	for _, name := range eligible {
		s := score(name, ip)
		if d := bytes.Compare(s[:], best[:]); !ok || d < 0 || (d == 0 && name < owner) {
			owner, best, ok = name, s, true
		}
	}
	return owner, ok
}

// Layer2Owners returns the owner of each address that has one. Each
// address is elected on its own, so a dual-stack Service's IPv4 and IPv6
// addresses may have different owners; Services sharing an address
// always agree on its owner, since the ipam package lets them share only
// with the same backends.
func Layer2Owners(in *Input, ips []netip.Addr) map[netip.Addr]string {
	out := make(map[netip.Addr]string, len(ips))
	eligible := in.eligibleNames() // once for all addresses: it asks membership
	for _, ip := range ips {
		if o, ok := ownerAmong(eligible, ip); ok {
			out[ip] = o
		}
	}
	return out
}

// Mode is how an announcer makes addresses reachable.
type Mode uint8

const (
	// Layer2: one node per address (ARP, NDP).
	Layer2 Mode = iota + 1
	// BGP: every eligible node (ECMP).
	BGP
)

// Announced returns the addresses of ips, in order, that node self
// announces in mode m.
func Announced(m Mode, self string, in *Input, ips []netip.Addr) []netip.Addr {
	var out []netip.Addr
	switch m {
	case Layer2:
		eligible := in.eligibleNames()
		if !slices.Contains(eligible, self) {
			return nil // an ineligible node owns nothing
		}
		for _, ip := range ips {
			if o, _ := ownerAmong(eligible, ip); o == self {
				out = append(out, ip)
			}
		}
	case BGP:
		if slices.Contains(BGPAnnouncers(withoutGossipOn(in, self)), self) {
			out = append(out, ips...)
		}
	}
	return out
}

// withoutGossipOn returns in with Alive having no opinion of node. Gossip
// about this node itself matters to layer 2 only: a node cut off from
// the other daemons stops answering ARP for addresses they may have
// moved (core/membership), but its BGP routes, which the router spreads
// over every announcer, may stay.
func withoutGossipOn(in *Input, node string) *Input {
	if in.Alive == nil {
		return in
	}
	alive := in.Alive
	out := *in
	out.Alive = func(n string) (bool, bool) {
		if n == node {
			return false, false
		}
		return alive(n)
	}
	return &out
}
