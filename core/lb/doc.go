// Package lb is the LoadBalancer control plane of one daemon: everything
// that gives LoadBalancer addresses out and makes them reachable, except
// the loop that acts on them. It owns
//
//   - the address allocator (core/lbipam) with the config's pools, and
//     their metrics;
//   - the announcers the config lists, built through their Type, each
//     with an owner: one goroutine that makes every call that changes
//     the announcer (the loop's Announce, a rotated BGP password, the
//     nodes a cloud load balancer fronts after a node change or a
//     reload), in the order they came, so no announcer has two writers;
//   - the pools and node selectors a reload changes live (announcerSlot),
//     read by the loop's election, and their version, which tells the
//     loop to elect every address again after a reload;
//   - gossip membership (core/membership), its encryption keys and their
//     rotation from a Secret;
//   - the Secrets it follows, in the daemon's namespace only;
//   - the announcers' part of /readyz (announcerHealth) and their
//     AnnounceFailed Events (announcers/report);
//   - what a stop of the daemon means for this node (Intent: a restart,
//     or the node going away, decided by ShutdownIntent from the Node
//     the watch reported), which Close acts on: a restart leaves what
//     may stay announced in place (Instance.Restart).
//
// The loop (core/reconcile) drives it through what Manager hands out:
// Elected for the election and announcing, Alive for gossip's view of
// the nodes, SetNodes as its OnNodes hook. The loop is the one place
// that acts on the plan; the Manager only routes what the loop, the
// Secrets and the reloads say to each announcer's owner.
//
// # Announcer types
//
// An announcer type is registered, not switched on: Types maps the
// config's type string (config.Announcer.Type) to a Type, which says how
// the election treats it and builds it from config. Builtin holds arp,
// bgp and cloud. Adding a type is its package (a plugin.Announcer and a
// Type built from its config block) plus one registration line in the
// daemon's announcerTypes (cmd/switchyard):
//
//	types := lb.Builtin()
//	types["static"] = static.Type // the one registration line
//
// The config names it with `type: static` and gives its settings in the
// announcer's `settings:` block, which core/config keeps as it was
// written and the type decodes strictly (config.Announcer.DecodeSettings)
// in its Check and New. Types.Check, which the daemon passes to
// config.Parse at start and on every reload, refuses a type that is not
// registered and reports the Check of a type registered outside
// core/config, so a bad block is refused with the announcer's path and
// line while the last good config keeps running. A type that needs this
// node (BGP: its router ID and peer selectors) sets
// NeedsNode and starts once the watch has reported the node, read from
// the loop's nodes (model.Node keeps every address with its type), never
// from the API server.
//
// The name: lb, not announcers/manage, because it owns more than
// announcers (allocation, membership), and the announcers' packages
// stay free of config, Kubernetes and this package: the built-in types'
// factories live here (arp.go, bgp.go, cloud.go).
package lb
