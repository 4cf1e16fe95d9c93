// Package cloud is the announcer for cloud load balancers: it asks an
// external provider, over the HTTP webhook specified in CONTRACT.md, to
// send a LoadBalancer address's traffic to a set of nodes (ensure), and
// to stop (release).
//
// Announce is declarative and never waits for the network: it records
// the complete set of addresses this node should announce and wakes the
// Announcer's own goroutine, which diffs it against what the provider
// last confirmed and sends only the difference. Transient failures (5xx,
// 401, 408, 429, network errors, timeouts) are retried with capped
// exponential backoff; rejections (other 4xx) are not retried until the
// address's desired state changes or the periodic resync (default 5
// minutes, which also ensures every address again). Healthy reports both. The package
// does not log: Options.OnCall is a hook for logs and metrics.
//
// Node set: a cloud balancer fronts nodes, so every ensure names them.
// They come from SetNodes, not from configuration, because they change at
// run time (nodes join, leave, turn NotReady or stop matching the
// announcer's node selector); the daemon feeds it from the Node
// informer. A change re-ensures every address it changes. No ensure is
// sent before the first SetNodes: an empty node set is never sent by
// mistake. An announcement that carries Nodes (model.Announcement.Nodes:
// with externalTrafficPolicy Local, the nodes running a ready endpoint)
// narrows its address to those of SetNodes' nodes; a change of them
// ensures that address again. Each node goes with its weight
// (model.Announcement.Weights: its ready endpoints with
// externalTrafficPolicy Local, else 1), so that a provider able to weigh
// backends sends each node its share; a change of weights alone ensures
// that address again.
//
// The daemon should elect the cloud announcer like layer 2 (one owner per
// address), so that one node calls per address; the owner field of the
// contract keeps a moving address from being released by its previous
// owner. Close stops the goroutine without releasing anything.
package cloud
