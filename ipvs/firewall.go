package ipvs

import (
	"net/netip"
	"slices"

	"github.com/switchyard-lb/switchyard/core/model"
)

// Firewall owns the dataplane's nftables table. Sync replaces its content
// with spec in one atomic transaction.
type Firewall interface {
	Sync(spec FirewallSpec) error
}

// FirewallSpec is what the nftables table implements: masquerade for
// traffic to service addresses that would otherwise not come back through
// this node.
type FirewallSpec struct {
	// ClusterIPs are masqueraded when the client is outside every cluster
	// CIDR (a hostNetwork client, another host), or always with
	// MasqueradeAll.
	ClusterIPs []netip.Addr
	// ExternalIPs are LoadBalancer and external addresses with
	// externalTrafficPolicy Cluster: always masqueraded. Local ones keep
	// the client's address and are in neither list unless MasqueradeAll.
	ExternalIPs []netip.Addr
	// NodePorts are NodePort virtual services with externalTrafficPolicy
	// Cluster: always masqueraded. Sorted.
	NodePorts     []model.VirtualServiceKey
	ClusterCIDRs  []netip.Prefix
	MasqueradeAll bool
	// SourceRanges drop traffic to a virtual service from other sources
	// (loadBalancerSourceRanges). Sorted by key.
	SourceRanges []SourceRange
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
		slices.Equal(s.ClusterCIDRs, o.ClusterCIDRs) && s.MasqueradeAll == o.MasqueradeAll &&
		slices.EqualFunc(s.SourceRanges, o.SourceRanges, func(a, b SourceRange) bool {
			return a.Key == b.Key && slices.Equal(a.Ranges, b.Ranges)
		})
}

// BuildFirewallSpec derives the spec from the desired virtual services.
// An address with both a Local and a Cluster external frontend is
// masqueraded (the set is keyed by address only).
func BuildFirewallSpec(want Desired, cidrs []netip.Prefix, masqueradeAll bool) FirewallSpec {
	cluster, external := map[netip.Addr]bool{}, map[netip.Addr]bool{}
	spec := FirewallSpec{ClusterCIDRs: slices.Clone(cidrs), MasqueradeAll: masqueradeAll}
	for k, ds := range want.Services {
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
	slices.SortFunc(spec.ClusterIPs, netip.Addr.Compare)
	slices.SortFunc(spec.ExternalIPs, netip.Addr.Compare)
	slices.SortFunc(spec.NodePorts, model.VirtualServiceKey.Compare)
	slices.SortFunc(spec.SourceRanges, func(a, b SourceRange) int { return a.Key.Compare(b.Key) })
	return spec
}
