//go:build wasip1

package main

import (
	"bytes"
	"errors"

	"github.com/switchyard-lb/switchyard/wasm-sdk/go/policy"
)

func evaluate(in *policy.Input, out *policy.Output) error {
	params := in.Params()
	sel, found, err := policy.ParamString(params, "canary")
	if err != nil {
		return err
	}
	if !found {
		return errors.New("params: canary is missing")
	}
	canary, err := parseSelector(sel)
	if err != nil {
		return err
	}
	percent, err := policy.ParamUint(params, "percent", 10)
	if err != nil {
		return err
	}
	if percent > 100 {
		return errors.New("params: percent is above 100")
	}

	var nc, ns uint32
	for i := range in.Len() {
		if in.Usable(i) {
			if canary.match(in.Endpoint(i)) {
				nc++
			} else {
				ns++
			}
		}
	}
	cw, sw := uint32(100), uint32(100)
	if nc > 0 && ns > 0 {
		cw, sw = share(percent, nc), share(100-percent, ns)
	}
	for i := range in.Len() {
		e := in.Endpoint(i)
		switch {
		case !in.Usable(i):
		case canary.match(e):
			out.SetWeight(i, cw)
		default:
			out.SetWeight(i, sw)
		}
	}
	out.SetScheduler("wrr")
	return nil
}

// share is each of n endpoints' weight when together they get percent of
// a total of 10,000.
func share(percent, n uint32) uint32 {
	if percent == 0 {
		return 0
	}
	return max(1, percent*10000/(100*n))
}

// selector picks the canary endpoints. It is a value, not a closure, so
// evaluations produce no garbage.
type selector struct {
	kind         byte // 'z' zone, 'n' node, 'c' cidr
	value        []byte
	prefix, mask uint32
}

func (s *selector) match(e policy.Endpoint) bool {
	switch s.kind {
	case 'z':
		return bytes.Equal(e.Zone(), s.value)
	case 'n':
		return bytes.Equal(e.NodeName(), s.value)
	}
	if e.Family() != 4 {
		return false
	}
	a := e.Addr()
	v := uint32(a[12])<<24 | uint32(a[13])<<16 | uint32(a[14])<<8 | uint32(a[15])
	return v&s.mask == s.prefix&s.mask
}

// parseSelector parses zone=<z>, node=<n> or cidr=<a.b.c.d>/<len>.
func parseSelector(sel []byte) (selector, error) {
	switch {
	case bytes.HasPrefix(sel, []byte("zone=")):
		return selector{kind: 'z', value: sel[5:]}, nil
	case bytes.HasPrefix(sel, []byte("node=")):
		return selector{kind: 'n', value: sel[5:]}, nil
	case bytes.HasPrefix(sel, []byte("cidr=")):
		prefix, bits, ok := parseCIDR4(sel[5:])
		if !ok {
			return selector{}, errors.New("params: canary cidr is not an IPv4 prefix a.b.c.d/len")
		}
		s := selector{kind: 'c', prefix: prefix}
		if bits > 0 {
			s.mask = ^uint32(0) << (32 - bits)
		}
		return s, nil
	}
	return selector{}, errors.New("params: canary must be zone=<zone>, node=<node> or cidr=<a.b.c.d/len>")
}

// parseCIDR4 parses a.b.c.d/len: decimal numbers without leading zeros.
func parseCIDR4(s []byte) (addr uint32, bits uint32, ok bool) {
	i := 0
	num := func(maxV uint32) (uint32, bool) {
		start, v := i, uint32(0)
		for i < len(s) && s[i] >= '0' && s[i] <= '9' && i-start < 3 {
			v = v*10 + uint32(s[i]-'0')
			i++
		}
		if i == start || (s[start] == '0' && i-start > 1) || v > maxV {
			return 0, false
		}
		return v, true
	}
	for k := range 4 {
		v, ok := num(255)
		if !ok {
			return 0, 0, false
		}
		addr = addr<<8 | v
		sep := byte('.')
		if k == 3 {
			sep = '/'
		}
		if i >= len(s) || s[i] != sep {
			return 0, 0, false
		}
		i++
	}
	bits, ok = num(32)
	return addr, bits, ok && i == len(s)
}

func init() { policy.Register(evaluate) }

func main() {}
