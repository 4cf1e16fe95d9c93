package arp

import (
	"net/netip"
	"slices"
)

func sortAddrs(s []netip.Addr) { slices.SortFunc(s, netip.Addr.Compare) }
