//go:build !linux

package bgp

import (
	"fmt"
	"net/netip"
	"runtime"
)

// dropConnections is Linux-only: elsewhere a restart ends the sessions
// with a Cease, as Close does.
func dropConnections(map[netip.AddrPort]bool, map[netip.Addr]bool, uint16) (int, error) {
	return 0, fmt.Errorf("dropping BGP connections without a NOTIFICATION is not implemented on %s/%s", runtime.GOOS, runtime.GOARCH)
}
