package model

import "net/netip"

// ReadyPerNode returns, by node name, how many ready endpoints of eps run
// on each node: its distinct ready addresses of one family (of the family
// with more, for a dual-stack Service), as kube-proxy counts a node's
// local endpoints for the health check. A node without a ready endpoint
// is absent; endpoints that name no node count nowhere. Nil when no node
// has one.
func ReadyPerNode(eps []Endpoint) map[string]int {
	type nodeFamily struct {
		node string
		v6   bool
	}
	seen := make(map[nodeFamily]map[netip.Addr]bool)
	for i := range eps {
		ep := &eps[i]
		if !ep.Ready || ep.NodeName == "" || !ep.Addr.IsValid() {
			continue
		}
		k := nodeFamily{ep.NodeName, !ep.Addr.Is4()}
		if seen[k] == nil {
			seen[k] = make(map[netip.Addr]bool)
		}
		seen[k][ep.Addr] = true
	}
	var out map[string]int
	for k, addrs := range seen {
		if out == nil {
			out = make(map[string]int)
		}
		out[k.node] = max(out[k.node], len(addrs))
	}
	return out
}
