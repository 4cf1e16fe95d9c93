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
// Split-brain guard (Config.DisableQuorumGuard turns it off). From one
// side of a partition, the others look dead; the other side, if it holds
// a majority, moves this side's layer-2 addresses. So:
//
//   - a daemon whose silent members could form a strict majority without
//     it (no packet from them within a window, or gossip
//     declared them dead) is cut off: Alive reports it not alive to
//     itself, so it answers for no layer-2 address, and has no opinion
//     of the others (Kubernetes readiness decides for them; the BGP
//     election ignores gossip about the node itself, so its routes
//     stay); back from the cut, it waits a window more, so that the
//     members that took its addresses, which see it back at once, have
//     given them up before it answers for them again (a daemon that
//     just started waits the same, since it may have been dead a
//     moment ago);
//   - a daemon with a strict majority alive trusts gossip, but reports a
//     member declared dead still alive for a fence as long as that
//     window, so that a member merely cut off has stopped answering
//     before its addresses move: at every moment one node answers;
//   - with exactly half alive, neither side can hold a majority, and
//     every daemon falls back to Kubernetes readiness, alike on both
//     sides;
//   - a member dead to gossip and NotReady in Kubernetes (Peer.NotReady)
//     is gone and no longer counts, so the survivor of a crash of most
//     of the cluster takes over once Kubernetes agrees (about 40 s).
//
// Restarts (Config.RestartGrace): a daemon that stops to restart
// (CloseForRestart: the DaemonSet's update, not a node going away)
// leaves saying so in its metadata, and the others hold it alive, its
// layer-2 addresses where they are, for their grace or until it is
// back; its node's dataplane forwards meanwhile. For the guard a held
// member counts, neither alive nor heard, as a member just declared
// dead does, so a partition meanwhile gives no side a majority it would
// not have had. Only a member that said it restarts is held: one that
// crashed, or whose node is gone (NotReady), is judged as before, and
// one still away when the grace ends is dead since then.
//
// The window is 2 x max(SuspicionMult, members) probe intervals (600ms
// for three daemons with LANTiming), which the fence adds to failover.
// A member falsely declared dead (it answered too late on a starved
// machine) is dialled at once, so that it learns of it and refutes.
// "Heard" is any packet from a member's address (the transport notes
// each one's source, late acks included), and Run refreshes the view on
// a tick, since silence and fences change it without an event. Not
// covered: a one-way partition, where a member hears the others but they
// do not hear it (it keeps its addresses while they move them after the
// fence); and with the window growing with the cluster, large clusters
// fail over more slowly.
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
