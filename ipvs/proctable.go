package ipvs

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/switchyard-lb/switchyard/core/model"
)

// TableReader is a Kernel that can read the real servers of every
// virtual service in one pass, which a full resync uses instead of one
// Destinations dump per virtual service.
type TableReader interface {
	// ReadTable returns the real servers of every virtual service with an
	// address (firewall-mark services are left out: the kernel's table
	// does not say their family), each sorted by key. A service with no
	// real servers may be missing. Rates are zero.
	ReadTable() (map[model.VirtualServiceKey][]DestinationState, error)
}

// ParseProcTable parses the kernel's /proc/net/ip_vs: the real servers of
// each virtual service with an address, sorted by key; firewall-mark
// services and their real servers are skipped.
func ParseProcTable(r io.Reader) (map[model.VirtualServiceKey][]DestinationState, error) {
	out := map[model.VirtualServiceKey][]DestinationState{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	var (
		cur  model.VirtualServiceKey
		skip = true // before the first service, and under a firewall-mark one
	)
	for line := 0; sc.Scan(); line++ {
		text := sc.Text()
		if line < 3 {
			continue // the version and the two column headers
		}
		f := strings.Fields(text)
		if len(f) == 0 {
			continue
		}
		if f[0] == "->" {
			if skip {
				continue
			}
			if len(f) < 6 {
				return nil, fmt.Errorf("ipvs: /proc/net/ip_vs line %d: %q: want 6 fields", line+1, text)
			}
			ap, err := parseProcAddrPort(f[1])
			if err != nil {
				return nil, fmt.Errorf("ipvs: /proc/net/ip_vs line %d: %w", line+1, err)
			}
			var n [3]uint64
			for i := range n {
				if n[i], err = strconv.ParseUint(f[3+i], 10, 32); err != nil {
					return nil, fmt.Errorf("ipvs: /proc/net/ip_vs line %d: %w", line+1, err)
				}
			}
			out[cur] = append(out[cur], DestinationState{
				Destination: Destination{DestinationKey: DestinationKey{Addr: ap.Addr(), Port: ap.Port()}, Weight: uint32(n[0])},
				ActiveConns: uint32(n[1]), InactiveConns: uint32(n[2]),
			})
			continue
		}
		skip = true
		var p model.Protocol
		switch f[0] {
		case "TCP":
			p = model.TCP
		case "UDP":
			p = model.UDP
		case "SCTP":
			p = model.SCTP
		default: // FWM, or a protocol the dataplane never programs
			continue
		}
		if len(f) < 2 {
			return nil, fmt.Errorf("ipvs: /proc/net/ip_vs line %d: %q: no address", line+1, text)
		}
		ap, err := parseProcAddrPort(f[1])
		if err != nil {
			return nil, fmt.Errorf("ipvs: /proc/net/ip_vs line %d: %w", line+1, err)
		}
		cur, skip = model.VirtualServiceKey{Addr: ap.Addr(), Port: ap.Port(), Protocol: p}, false
		if _, ok := out[cur]; !ok {
			out[cur] = nil
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("ipvs: read /proc/net/ip_vs: %w", err)
	}
	for _, ds := range out {
		slices.SortFunc(ds, func(a, b DestinationState) int { return a.DestinationKey.Compare(b.DestinationKey) })
	}
	return out, nil
}

// parseProcAddrPort parses 0A600100:0050 (IPv4, hex) and
// [fd00:0010:...:000a]:0035 (IPv6).
func parseProcAddrPort(s string) (netip.AddrPort, error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return netip.AddrPort{}, fmt.Errorf("address %q: no port", s)
	}
	port, err := strconv.ParseUint(s[i+1:], 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("address %q: %w", s, err)
	}
	host := s[:i]
	var a netip.Addr
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		a, err = netip.ParseAddr(host[1 : len(host)-1])
	} else {
		var b []byte
		if b, err = hex.DecodeString(host); err == nil && len(b) != 4 {
			err = fmt.Errorf("%d bytes", len(b))
		}
		a, _ = netip.AddrFromSlice(b)
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("address %q: %w", s, err)
	}
	return netip.AddrPortFrom(a, uint16(port)), nil
}
