// Package arptest holds goroutine-safe in-memory transports for the arp
// announcer, so its wire behaviour can be tested without root: a
// net.PacketConn that carries Ethernet frames (give it to
// mdlayher/arp.New) and an NDP connection.
package arptest
