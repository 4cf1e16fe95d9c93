package kpbench

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
)

// NftTable is what kube-proxy's nftables mode programmed for ClusterIP
// Services, read from `nft list table ip kube-proxy` (or one of its
// chains, `nft list chain ip kube-proxy NAME`): the service-ips verdict
// map sends each ClusterIP:port to its service chain ("10.96.1.0 . tcp .
// 80 : goto service-HASH-ns/name/tcp/port"), whose rule DNATs to one of
// the endpoints through an anonymous numgen map ("dnat ip to numgen random
// mod 10 map { 0 : 10.64.0.1 . 8080, ... }"; nft 1.0.6 prints "dnat ip
// to", later versions "dnat ip addr . port to").
type NftTable struct {
	// ServiceIPs maps a virtual service to the chain its element jumps
	// or goes to.
	ServiceIPs map[VirtualService]string
	// Chains holds each listed chain's DNAT destinations: chains without
	// a numgen DNAT map are present with none.
	Chains map[string][]netip.AddrPort
}

// ParseNft reads the text of `nft list table` or `nft list chain`. Sets
// and maps other than service-ips, and rules other than the numgen DNAT,
// are skipped.
func ParseNft(r io.Reader) (NftTable, error) {
	t := NftTable{ServiceIPs: map[VirtualService]string{}, Chains: map[string][]netip.AddrPort{}}
	var (
		block    string // "map service-ips", "chain NAME", or another block
		elements strings.Builder
		inElems  bool // inside service-ips' "elements = { ... }", which nft wraps
	)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case inElems:
			elements.WriteString(line)
			if strings.HasSuffix(line, "}") {
				inElems = false
				if err := t.addServiceIPs(elements.String()); err != nil {
					return NftTable{}, fmt.Errorf("nft line %d: %w", n, err)
				}
			}
		case strings.HasPrefix(line, "table "):
		case strings.HasSuffix(line, "{") && (strings.HasPrefix(line, "chain ") || strings.HasPrefix(line, "map ") ||
			strings.HasPrefix(line, "set ")):
			block = strings.TrimSpace(strings.TrimSuffix(line, "{"))
			if name, ok := strings.CutPrefix(block, "chain "); ok {
				t.Chains[name] = nil
			}
		case line == "}":
			block = ""
		case block == "map service-ips" && strings.HasPrefix(line, "elements = {"):
			elements.Reset()
			elements.WriteString(strings.TrimPrefix(line, "elements = "))
			if !strings.HasSuffix(line, "}") {
				inElems = true
				continue
			}
			if err := t.addServiceIPs(elements.String()); err != nil {
				return NftTable{}, fmt.Errorf("nft line %d: %w", n, err)
			}
		case strings.HasPrefix(block, "chain ") && strings.Contains(line, "dnat ") && strings.Contains(line, " numgen "):
			chain := strings.TrimPrefix(block, "chain ")
			dests, err := parseNumgenMap(line)
			if err != nil {
				return NftTable{}, fmt.Errorf("nft line %d: chain %s: %w", n, chain, err)
			}
			t.Chains[chain] = append(t.Chains[chain], dests...)
		}
	}
	if err := sc.Err(); err != nil {
		return NftTable{}, fmt.Errorf("read nft output: %w", err)
	}
	if inElems {
		return NftTable{}, fmt.Errorf("nft output ends inside the service-ips elements")
	}
	return t, nil
}

// braces returns what is between the first '{' after key in s and the
// last '}'.
func braces(s, key string) (string, error) {
	i := strings.Index(s, key)
	if i < 0 {
		return "", fmt.Errorf("no %q in %q", key, s)
	}
	rest := s[i+len(key):]
	open, end := strings.IndexByte(rest, '{'), strings.LastIndexByte(rest, '}')
	if open < 0 || end < open {
		return "", fmt.Errorf("unbalanced braces in %q", s)
	}
	return rest[open+1 : end], nil
}

// addServiceIPs parses "{ 10.96.1.0 . tcp . 80 : goto CHAIN, ... }".
func (t NftTable) addServiceIPs(s string) error {
	body, err := braces(s, "")
	if err != nil {
		return err
	}
	for _, e := range strings.Split(body, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		key, verdict, ok := strings.Cut(e, " : ")
		f, v := strings.Split(key, " . "), strings.Fields(verdict)
		if !ok || len(f) != 3 || len(v) != 2 || (v[0] != "goto" && v[0] != "jump") {
			return fmt.Errorf("service-ips element %q: want \"ADDR . PROTO . PORT : goto CHAIN\"", e)
		}
		addr, err1 := netip.ParseAddr(strings.TrimSpace(f[0]))
		port, err2 := strconv.ParseUint(strings.TrimSpace(f[2]), 10, 16)
		if err1 != nil || err2 != nil {
			return fmt.Errorf("service-ips element %q: bad address or port", e)
		}
		vs := VirtualService{Protocol: strings.ToUpper(strings.TrimSpace(f[1])), Addr: netip.AddrPortFrom(addr, uint16(port))}
		t.ServiceIPs[vs] = v[1]
	}
	return nil
}

// parseNumgenMap parses the destinations of "... numgen random mod N map
// { 0 : ADDR . PORT, ... }".
func parseNumgenMap(rule string) ([]netip.AddrPort, error) {
	body, err := braces(rule, " numgen ")
	if err != nil {
		return nil, err
	}
	var dests []netip.AddrPort
	for _, e := range strings.Split(body, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		_, val, ok := strings.Cut(e, " : ")
		a, p, ok2 := strings.Cut(val, " . ")
		if !ok || !ok2 {
			return nil, fmt.Errorf("numgen map element %q: want \"N : ADDR . PORT\"", e)
		}
		addr, err1 := netip.ParseAddr(strings.TrimSpace(a))
		port, err2 := strconv.ParseUint(strings.TrimSpace(p), 10, 16)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("numgen map element %q: bad address or port", e)
		}
		dests = append(dests, netip.AddrPortFrom(addr, uint16(port)))
	}
	return dests, nil
}

// MissingNft counts the workload's endpoints absent from t: a Service
// whose ClusterIP has no service-ips element, or whose chain was not
// listed, misses all of them. 0 means kube-proxy's table sends every
// ClusterIP to every endpoint the workload's current state asks for.
func (w Workload) MissingNft(t NftTable) int {
	missing := 0
	for _, s := range w.Services {
		chain, ok := t.ServiceIPs[VirtualService{Protocol: "TCP", Addr: netip.AddrPortFrom(s.VIP, ServicePort)}]
		have := map[netip.AddrPort]bool{}
		if ok {
			for _, d := range t.Chains[chain] {
				have[d] = true
			}
		}
		for _, e := range s.Endpoints {
			if !have[netip.AddrPortFrom(e, TargetPort)] {
				missing++
			}
		}
	}
	return missing
}
