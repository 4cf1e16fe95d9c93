package kpbench

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
)

// VirtualService names an IPv4 IPVS virtual service.
type VirtualService struct {
	Protocol string // TCP, UDP or SCTP
	Addr     netip.AddrPort
}

// Table is the kernel's IPv4 IPVS table: each virtual service's real
// servers and their weights.
type Table map[VirtualService]map[netip.AddrPort]int

// ParseProcIPVS reads /proc/net/ip_vs: one read of the whole table,
// cheaper than a netlink dump per service while a proxy is busy on the
// guest's only CPU. IPv6 and firewall-mark services are skipped.
//
//	IP Virtual Server version 1.2.1 (size=4096)
//	Prot LocalAddress:Port Scheduler Flags
//	  -> RemoteAddress:Port Forward Weight ActiveConn InActConn
//	TCP  0A600101:0050 rr
//	  -> 0A400001:1F90      Masq    1      0          0
func ParseProcIPVS(r io.Reader) (Table, error) {
	t := Table{}
	var cur map[netip.AddrPort]int // nil while inside a skipped service
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		switch {
		case n <= 3 || len(f) == 0:
		case f[0] == "->":
			if cur == nil {
				continue
			}
			if len(f) < 4 {
				return nil, fmt.Errorf("/proc/net/ip_vs line %d: short real server line %q", n, sc.Text())
			}
			ap, ok, err := parseHexAddrPort(f[1])
			if err != nil {
				return nil, fmt.Errorf("/proc/net/ip_vs line %d: %w", n, err)
			}
			w, err := strconv.Atoi(f[3])
			if err != nil {
				return nil, fmt.Errorf("/proc/net/ip_vs line %d: weight %q: %w", n, f[3], err)
			}
			if ok {
				cur[ap] = w
			}
		case f[0] == "TCP" || f[0] == "UDP" || f[0] == "SCTP":
			cur = nil
			if len(f) < 2 {
				return nil, fmt.Errorf("/proc/net/ip_vs line %d: short service line %q", n, sc.Text())
			}
			ap, ok, err := parseHexAddrPort(f[1])
			if err != nil {
				return nil, fmt.Errorf("/proc/net/ip_vs line %d: %w", n, err)
			}
			if ok {
				cur = map[netip.AddrPort]int{}
				t[VirtualService{Protocol: f[0], Addr: ap}] = cur
			}
		default: // FWM services
			cur = nil
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read /proc/net/ip_vs: %w", err)
	}
	return t, nil
}

// parseHexAddrPort parses "0A600101:0050"; ok is false for an IPv6
// "[addr]:port", which the table skips.
func parseHexAddrPort(s string) (ap netip.AddrPort, ok bool, err error) {
	if strings.HasPrefix(s, "[") {
		return netip.AddrPort{}, false, nil
	}
	a, p, found := strings.Cut(s, ":")
	ab, err1 := hex.DecodeString(a)
	port, err2 := strconv.ParseUint(p, 16, 16)
	if !found || err1 != nil || err2 != nil || len(ab) != 4 {
		return netip.AddrPort{}, false, fmt.Errorf("bad address %q", s)
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte(ab)), uint16(port)), true, nil
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
