// Package bfd is Bidirectional Forwarding Detection for the BGP
// announcer's peers: RFC 5880 asynchronous mode over UDP, single hop
// (RFC 5881: port 3784, TTL 255 sent and required) and multihop (RFC
// 5883: port 4784). There is no authentication, no Demand mode and no
// Echo function.
//
// It is three layers, each testable alone:
//   - the packet codec (Marshal, Unmarshal), which refuses what RFC 5880
//     §6.8.6 says to discard before a session is looked up;
//   - Session, the state machine of one session (Down, Init, Up,
//     AdminDown; detection time; Poll/Final when its intervals change;
//     1 s transmission while not Up; jitter), pure: it is given the time
//     and the packets received, and returns what to send and when it next
//     needs the time;
//   - Server, which runs the sessions of configured peers on one
//     goroutine over a Transport (the sockets: UDPTransport on Linux, a
//     fake in bfdtest) and a runner.Clock, demultiplexes received packets
//     by discriminator or by peer address (RFC 5880 §6.3), checks the TTL,
//     and reports every state change to its OnChange hook. When it runs
//     late for a detection deadline (LateWake: its process was starved,
//     not the path), it first gives the receive path ReceiveGrace to
//     deliver the packets that arrived meanwhile.
//
// A peer's replacement session (FRR's bfdd starts a new one, with a new
// discriminator, once BGP is up) takes over the local session through
// Down and Init again; that Down is marked Change.RemoteRestart, so that a
// client can tell it from a failure, and packets of the replaced remote
// session are ignored. The package does not log; OnChange and
// Server.Sessions are its hooks.
package bfd
