// Package netns is a test helper that builds throwaway Linux network
// namespaces, bridges and veth links with the ip(8) command, runs commands
// and Go code inside them, reads the next hops their kernels route a prefix
// to (NS.FIB), and tears everything down at test cleanup.
//
// It owns nothing outside the namespaces it creates: every namespace name
// carries a per-process prefix ("sy<pid>-"), and Require removes leftovers
// of earlier runs whose process is gone. Tests that use it need root (or
// CAP_SYS_ADMIN and CAP_NET_ADMIN); Require skips them otherwise.
package netns
