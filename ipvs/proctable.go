package ipvs

import (
	"bufio"
	"encoding/hex"
	"errors"
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
	// ReadTable returns the real servers of the virtual services the
	// kernel's table shows, each sorted by key (ParseProcTable: those with
	// a tunnel real server, and firewall-mark ones whose family it cannot
	// tell, are left out). A service with no real servers may be missing.
	// Rates are zero.
	ReadTable() (map[model.VirtualServiceKey][]DestinationState, error)
}

// procRecord is a virtual service of /proc/net/ip_vs as it is read.
type procRecord struct {
	key    model.VirtualServiceKey // an address service's
	mark   uint32                  // a firewall-mark service's, when key is unset
	dests  []DestinationState
	tunnel bool // a real server forwards by tunnel, whose encapsulation the table does not show
}

// ParseProcTable parses the kernel's /proc/net/ip_vs: the real servers of
// each virtual service, sorted by key. Left out: a service with a tunnel
// real server (the table does not show ipip from GUE, nor GUE's port),
// and a firewall-mark service whose family the table does not tell: it
// shows a mark without its family, which only its real servers give (the
// kernel takes a real server of the other family only for tunnels), so a
// mark service without real servers, or shown twice, is left out. A mark
// service is keyed by MarkKey.
func ParseProcTable(r io.Reader) (map[model.VirtualServiceKey][]DestinationState, error) {
	out := map[model.VirtualServiceKey][]DestinationState{}
	twice := map[model.VirtualServiceKey]bool{} // mark keys shown more than once
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	var cur *procRecord // nil before the first service and under one the dataplane never programs
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
			if cur == nil {
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
			cur.tunnel = cur.tunnel || f[2] == "Tunnel"
			cur.dests = append(cur.dests, DestinationState{
				Destination: Destination{DestinationKey: DestinationKey{Addr: ap.Addr(), Port: ap.Port()}, Weight: uint32(n[0])},
				ActiveConns: uint32(n[1]), InactiveConns: uint32(n[2]),
			})
			continue
		}
		cur.addTo(out, twice)
		var err error
		if cur, err = parseProcService(f); err != nil {
			return nil, fmt.Errorf("ipvs: /proc/net/ip_vs line %d: %q: %w", line+1, text, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("ipvs: read /proc/net/ip_vs: %w", err)
	}
	cur.addTo(out, twice)
	return out, nil
}

// parseProcService parses a service line's fields: nil for a protocol the
// dataplane never programs.
func parseProcService(f []string) (*procRecord, error) {
	var p model.Protocol
	switch f[0] {
	case "TCP":
		p = model.TCP
	case "UDP":
		p = model.UDP
	case "SCTP":
		p = model.SCTP
	case "FWM":
		if len(f) < 2 {
			return nil, errors.New("no mark")
		}
		m, err := strconv.ParseUint(f[1], 16, 32)
		if err != nil {
			return nil, fmt.Errorf("mark: %w", err)
		}
		return &procRecord{mark: uint32(m)}, nil
	default:
		return nil, nil
	}
	if len(f) < 2 {
		return nil, errors.New("no address")
	}
	ap, err := parseProcAddrPort(f[1])
	if err != nil {
		return nil, err
	}
	return &procRecord{key: model.VirtualServiceKey{Addr: ap.Addr(), Port: ap.Port(), Protocol: p}}, nil
}

// addTo adds the record r to out, its real servers sorted, unless the
// table cannot tell what it is (ParseProcTable); twice holds the mark keys
// seen before.
func (r *procRecord) addTo(out map[model.VirtualServiceKey][]DestinationState, twice map[model.VirtualServiceKey]bool) {
	if r == nil || r.tunnel {
		return
	}
	slices.SortFunc(r.dests, func(a, b DestinationState) int { return a.DestinationKey.Compare(b.DestinationKey) })
	if r.key.Addr.IsValid() {
		out[r.key] = r.dests
		return
	}
	if len(r.dests) == 0 {
		return
	}
	v6 := r.dests[0].Addr.Is6()
	for _, d := range r.dests {
		if d.Addr.Is6() != v6 {
			return
		}
	}
	k := MarkKey(r.mark, v6)
	if _, seen := out[k]; seen || twice[k] {
		delete(out, k)
		twice[k] = true
		return
	}
	out[k] = r.dests
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
