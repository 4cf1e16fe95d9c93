package plugin

import (
	"net/netip"

	"github.com/switchyard-lb/switchyard/core/election"
)

// ElectedAnnouncer is how the loop drives an Announcer: it announces
// only the addresses this node wins in an election among the nodes
// (core/election), per address of the plan the announcer serves. The
// LoadBalancer control plane (core/lb) builds one per configured
// announcer.
type ElectedAnnouncer struct {
	Announcer Announcer
	// Mode is election.Layer2 (one node per address: ARP, cloud) or
	// election.BGP (every eligible node).
	Mode election.Mode
	// Serves reports whether the announcer is responsible for an address
	// (the address lies in one of its pools); nil serves every address.
	Serves func(netip.Addr) bool
	// Selector is the announcer's node selector; nil selects every node.
	Selector election.Matcher
	// WithNodes makes every announcement carry the nodes that serve its
	// address (model.Announcement.Nodes): the union, over the Services
	// sharing the address, of the nodes eligible for the Service. An
	// announcer that sends traffic to other nodes (cloud) needs it to
	// honour externalTrafficPolicy Local.
	WithNodes bool
	// Version, when set, changes whenever Serves or Selector may answer
	// differently (a reload of the pools or the node selector): the loop
	// keeps each announcer's election between Syncs and elects every
	// address again when it changes. Nil: they never change.
	Version func() uint64
}
