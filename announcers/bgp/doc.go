// Package bgp is Switchyard's BGP announcer: an embedded GoBGP v3 speaker
// that advertises each announced LoadBalancer address as a /32 or /128 host
// route with this node as next hop, to the peers in its Config.
//
// It owns the BgpServer it starts, the paths it adds to it, and the export
// policy it installs for per-peer communities and local preference. It
// implements core/plugin.Announcer: Announce takes the complete desired set,
// diffs it against what was last sent and only adds or withdraws the
// difference, so repeating a set sends nothing. The speaker only dials out
// (no listening socket unless Config.ListenPort is set), so it needs no
// privilege.
//
// Close withdraws every route and ends each session with a Cease
// NOTIFICATION, so peers drop this node at once, graceful restart or not.
// Graceful restart (Config.GracefulRestart) covers the unplanned cases
// only: a crash, SIGKILL or OOM kill of the daemon, where peers keep the
// routes as stale for RestartTime and refresh them when the restarted
// speaker sends its End-of-RIB. GoBGP sends End-of-RIB right after the
// routes it has when a session comes up, so after a restart call Announce
// soon after New (GoBGP's first connection attempt waits 1-2 s): a route
// missing from that first burst is flushed by the peer and comes back with
// the next Announce.
//
// GoBGP limits worth knowing: after a session drops, GoBGP stays idle 5 s
// before reconnecting (a constant), then waits ConnectRetry; StartBgp
// writes package-level settings, so run one Speaker per process; the
// management goroutine (Serve) cannot be ended, so it idles after Close.
//
// GoBGP logs through a log.Logger interface; the package adapts it to the
// *slog.Logger passed in, and never lets GoBGP's Fatal exit the process.
// Peer session state is exposed by Speaker.Sessions for metrics.
//
// A peer's TCP MD5 password may change at run time (SetPassword, for a
// rotated Secret); a peer configured AdminDown waits for its first one.
// Announce reports a route that failed as a plugin.AddrError.
package bgp
