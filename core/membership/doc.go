// Package membership owns gossip membership among the Switchyard daemons
// (hashicorp/memberlist): which daemons are alive right now, learnt
// within a second of a node's death instead of the tens of seconds
// Kubernetes needs to mark a node NotReady.
//
// It answers one question for the pure election (core/election):
// Alive(node) (alive, known bool), so that a layer-2 address moves as soon
// as its owner stops answering gossip. Nodes it has never seen are
// unknown, and Kubernetes readiness decides for them.
//
// Split-brain guard: a daemon that sees no strict majority of the
// members it knows alive (it is probably the one cut off) abstains,
// answering known=false for every node, so that it does not grab the
// addresses of nodes it merely cannot hear; Kubernetes readiness, judged
// centrally by the API server, decides for it instead. The cost is that a
// two-node cluster never fails over through gossip (one of two alive is
// no majority). Config.DisableQuorumGuard turns the guard off.
//
// Handlers record, one consumer acts: memberlist's callbacks only update
// a map under a mutex and poke a one-slot channel (Changes), so they never
// block memberlist's goroutines; the daemon's loop reads the channel and
// re-runs the election. Joining peers happens on the goroutine of Run,
// which also rejoins known peers periodically so that two halves of a
// healed partition merge again.
//
// The package does not log by itself: memberlist's own log lines go to
// the injected slog.Logger.
package membership
