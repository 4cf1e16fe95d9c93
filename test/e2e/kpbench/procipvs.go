package kpbench

import (
	"bytes"
	"io"
	"net/netip"

	"github.com/switchyard-lb/switchyard/ipvs"
)

// VirtualService names an IPv4 IPVS virtual service.
type VirtualService struct {
	Protocol string // TCP, UDP or SCTP
	Addr     netip.AddrPort
}

// Table is the kernel's IPv4 IPVS table: each virtual service's real
// servers and their weights.
type Table map[VirtualService]map[netip.AddrPort]int

// ParseProcIPVS reads /proc/net/ip_vs (ipvs.ParseProcTable): one read of
// the whole table, cheaper than a netlink dump per service while a proxy
// is busy on the guest's only CPU. IPv6 and firewall-mark services are
// skipped.
func ParseProcIPVS(r io.Reader) (Table, error) {
	kernel, err := ipvs.ParseProcTable(r)
	if err != nil {
		return nil, err
	}
	t := Table{}
	for k, ds := range kernel {
		if _, mark := ipvs.MarkOf(k); mark || !k.Addr.Is4() {
			continue
		}
		dests := make(map[netip.AddrPort]int, len(ds))
		for _, d := range ds {
			dests[netip.AddrPortFrom(d.Addr, d.Port)] = int(d.Weight)
		}
		t[VirtualService{Protocol: k.Protocol.String(), Addr: netip.AddrPortFrom(k.Addr, k.Port)}] = dests
	}
	return t, nil
}

// Missing counts the workload's real servers absent from t: 0 means the
// table holds everything the workload's current state asks for.
func (w Workload) Missing(t Table) int {
	missing := 0
	for _, s := range w.Services {
		dests := t[VirtualService{Protocol: "TCP", Addr: netip.AddrPortFrom(s.VIP, ServicePort)}]
		for _, e := range s.Endpoints {
			if _, ok := dests[netip.AddrPortFrom(e, TargetPort)]; !ok {
				missing++
			}
		}
	}
	return missing
}

// CountRealServers counts the real server lines of a /proc/net/ip_vs
// read without parsing them (every family and kind of service): an upper
// bound of what ParseProcIPVS returns. While a proxy is still
// programming, fewer lines than the workload has endpoints prove the
// table incomplete at a fraction of a parse's cost, CPU the proxy
// measured shares the guest's one CPU with.
func CountRealServers(data []byte) int {
	n := bytes.Count(data, []byte("\n  -> "))
	if bytes.HasPrefix(data, []byte("  -> ")) {
		n++
	}
	// The header's third line has the same shape.
	if bytes.Contains(data, []byte("\n  -> RemoteAddress:Port ")) {
		n--
	}
	return n
}
