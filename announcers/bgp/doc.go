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
// NOTIFICATION, so peers drop this node at once, graceful restart or not:
// the node is going away. CloseForRestart is for a restart of the daemon:
// with graceful restart (Config.GracefulRestart, RFC 4724) it withdraws
// nothing and ends each session without a NOTIFICATION, by shutting down
// its TCP connection (GoBGP's own stop always sends a Cease), as a crash,
// SIGKILL or OOM kill does. Peers keep the routes, marked stale, for
// RestartTime; the restarted speaker says it restarts with its forwarding
// state kept (the R and F bits: the dataplane is left in place), so peers
// keep them across its new session's OPEN, and refresh them with its
// routes and End-of-RIB. For that End-of-RIB to follow the complete set,
// a speaker with graceful restart adds its peers at its first Announce,
// after its routes: no session opens before. Without graceful restart,
// CloseForRestart is Close.
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
// A peer with Peer.BFD runs a BFD session (package bfd: single hop, or
// multihop when EBGPMultihopTTL is set) over the host's UDP sockets. When
// an Up session fails (detection time expired, or the peer says Down),
// the speaker disables the GoBGP peer at once: a Cease NOTIFICATION, and
// the peer's routes are gone from this node's side without waiting for
// the hold timer. The peer is enabled again when BFD is Up again, or
// after its hold time if BFD stays down. A peer's AdminDown (RFC 5882)
// and a peer replacing its session (FRR's bfdd does once BGP is up) are
// not failures. Speaker.BFDSessions reports the sessions.
//
// A peer's TCP MD5 password may change at run time (SetPassword, for a
// rotated Secret); a peer configured AdminDown waits for its first one.
// Announce reports a route that failed as a plugin.AddrError.
package bgp
