package conformance

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-lb/switchyard/core/plugin"
)

// Examples are the example policies every SDK ships, by module name.
var Examples = []string{"zoneaware", "canary", "leastconn", "slowstart"}

// References are the native Go statements of the examples: each returns
// what every SDK's module must return, or an error when the module must
// decline. They are written from wasm-sdk/examples.md, independently of
// any SDK.
var References = map[string]func(*plugin.PolicyInput) (plugin.PolicyResult, error){
	"zoneaware": ZoneAware,
	"canary":    Canary,
	"leastconn": LeastConn,
	"slowstart": SlowStart,
}

const maxWeight = 65535

// params is the policy parameters of one input, validated per
// wasm-sdk/examples.md. encoding/json validates the whole object and keeps
// the last of duplicate keys, where the SDKs stop at the first occurrence:
// the two agree on every scenario without duplicate keys or garbage after
// the keys read.
type params map[string]json.RawMessage

func parseParams(raw []byte) (params, error) {
	p := params{}
	if len(bytes.TrimSpace(raw)) == 0 {
		return p, nil
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, fmt.Errorf("params: %w", err)
	}
	return p, nil
}

var jsonUint = regexp.MustCompile(`^(0|[1-9][0-9]*)$`)

func (p params) uint(key string, def uint32) (uint64, error) {
	raw, ok := p[key]
	if !ok {
		return uint64(def), nil
	}
	v, err := strconv.ParseUint(string(raw), 10, 32)
	if !jsonUint.Match(raw) || err != nil {
		return 0, fmt.Errorf("params: %s is not an integer from 0 to 4294967295", key)
	}
	return v, nil
}

func (p params) str(key string) (string, bool, error) {
	raw, ok := p[key]
	if !ok {
		return "", false, nil
	}
	if len(raw) < 2 || raw[0] != '"' || bytes.IndexByte(raw, '\\') >= 0 {
		return "", false, fmt.Errorf("params: %s is not a string without escapes", key)
	}
	return string(raw[1 : len(raw)-1]), true, nil
}

// usable reports the usable endpoints: the ready ones, or when none is
// ready, the serving terminating ones.
func usable(in *plugin.PolicyInput) []bool {
	ready := false
	for _, ep := range in.Endpoints {
		ready = ready || ep.Ready
	}
	u := make([]bool, len(in.Endpoints))
	for i, ep := range in.Endpoints {
		u[i] = ep.Ready || (!ready && ep.Serving && ep.Terminating)
	}
	return u
}

func capWeight(w uint64) uint32 { return uint32(min(w, maxWeight)) }

// ZoneAware keeps traffic in this node's zone and spills when it is busy.
func ZoneAware(in *plugin.PolicyInput) (plugin.PolicyResult, error) {
	p, err := parseParams(in.Params)
	if err != nil {
		return plugin.PolicyResult{}, err
	}
	spillAt, err1 := p.uint("spillAt", 100)
	local, err2 := p.uint("localWeight", 100)
	spill, err3 := p.uint("spillWeight", 10)
	if err := errors.Join(err1, err2, err3); err != nil {
		return plugin.PolicyResult{}, err
	}
	u := usable(in)
	var inZone, conns uint64
	for i, ep := range in.Endpoints {
		if u[i] && ep.SameZone {
			inZone++
			conns += uint64(ep.Stats.ActiveConns)
		}
	}
	w := make([]uint32, len(in.Endpoints))
	for i, ep := range in.Endpoints {
		switch {
		case !u[i]:
		case inZone == 0 || ep.SameZone:
			w[i] = capWeight(local)
		case conns >= spillAt*inZone:
			w[i] = capWeight(spill)
		}
	}
	return plugin.PolicyResult{Weights: w, Scheduler: "wrr", Reevaluate: 10 * time.Second}, nil
}

// Canary splits percent of the weight to the canary endpoints.
func Canary(in *plugin.PolicyInput) (plugin.PolicyResult, error) {
	p, err := parseParams(in.Params)
	if err != nil {
		return plugin.PolicyResult{}, err
	}
	sel, ok, err := p.str("canary")
	if err != nil {
		return plugin.PolicyResult{}, err
	}
	if !ok {
		return plugin.PolicyResult{}, errors.New("params: canary is missing")
	}
	var match func(plugin.PolicyEndpoint) bool
	kind, val, found := strings.Cut(sel, "=")
	if !found {
		kind = ""
	}
	switch kind {
	case "zone":
		match = func(ep plugin.PolicyEndpoint) bool { return ep.Zone == val }
	case "node":
		match = func(ep plugin.PolicyEndpoint) bool { return ep.NodeName == val }
	case "cidr":
		prefix, err := parseCIDR4(val)
		if err != nil {
			return plugin.PolicyResult{}, err
		}
		match = func(ep plugin.PolicyEndpoint) bool { return ep.Addr.Is4() && prefix.Contains(ep.Addr) }
	default:
		return plugin.PolicyResult{}, fmt.Errorf("params: canary %q must be zone=, node= or cidr=", sel)
	}
	percent, err := p.uint("percent", 10)
	if err != nil {
		return plugin.PolicyResult{}, err
	}
	if percent > 100 {
		return plugin.PolicyResult{}, errors.New("params: percent is above 100")
	}
	u := usable(in)
	var nc, ns uint64
	for i, ep := range in.Endpoints {
		if u[i] && match(ep) {
			nc++
		} else if u[i] {
			ns++
		}
	}
	share := func(pct, n uint64) uint32 {
		if pct == 0 {
			return 0
		}
		return uint32(max(1, pct*10000/(100*n)))
	}
	cw, sw := uint32(100), uint32(100)
	if nc > 0 && ns > 0 {
		cw, sw = share(percent, nc), share(100-percent, ns)
	}
	w := make([]uint32, len(in.Endpoints))
	for i, ep := range in.Endpoints {
		switch {
		case !u[i]:
		case match(ep):
			w[i] = cw
		default:
			w[i] = sw
		}
	}
	return plugin.PolicyResult{Weights: w, Scheduler: "wrr"}, nil
}

// parseCIDR4 parses a.b.c.d/len as wasm-sdk/examples.md says: no leading
// zeros, host bits ignored.
func parseCIDR4(s string) (netip.Prefix, error) {
	bad := fmt.Errorf("params: canary cidr %q is not an IPv4 prefix a.b.c.d/len", s)
	addr, bits, ok := strings.Cut(s, "/")
	parts := strings.Split(addr, ".")
	if !ok || len(parts) != 4 {
		return netip.Prefix{}, bad
	}
	num := func(t string, limit uint64) (uint64, bool) {
		v, err := strconv.ParseUint(t, 10, 16)
		return v, err == nil && v <= limit && jsonUint.MatchString(t)
	}
	var a [4]byte
	for i, t := range parts {
		v, ok := num(t, 255)
		if !ok {
			return netip.Prefix{}, bad
		}
		a[i] = byte(v)
	}
	n, ok := num(bits, 32)
	if !ok {
		return netip.Prefix{}, bad
	}
	return netip.AddrFrom4(a).Prefix(int(n))
}

// LeastConn gives endpoints with fewer active connections more weight.
func LeastConn(in *plugin.PolicyInput) (plugin.PolicyResult, error) {
	p, err := parseParams(in.Params)
	if err != nil {
		return plugin.PolicyResult{}, err
	}
	scale, err := p.uint("scale", 10000)
	if err != nil {
		return plugin.PolicyResult{}, err
	}
	scale = min(scale, maxWeight)
	u := usable(in)
	w := make([]uint32, len(in.Endpoints))
	for i, ep := range in.Endpoints {
		if u[i] {
			w[i] = uint32(scale / (1 + uint64(ep.Stats.ActiveConns)))
			if w[i] == 0 && scale > 0 {
				w[i] = 1
			}
		}
	}
	return plugin.PolicyResult{Weights: w, Scheduler: "wrr", Reevaluate: 5 * time.Second}, nil
}

// SlowStart ramps new endpoints' weight up over a window.
func SlowStart(in *plugin.PolicyInput) (plugin.PolicyResult, error) {
	p, err := parseParams(in.Params)
	if err != nil {
		return plugin.PolicyResult{}, err
	}
	windowSec, err1 := p.uint("windowSec", 60)
	weight, err2 := p.uint("weight", 100)
	if err := errors.Join(err1, err2); err != nil {
		return plugin.PolicyResult{}, err
	}
	full, window := min(weight, maxWeight), time.Duration(windowSec)*time.Second
	u := usable(in)
	res := plugin.PolicyResult{Weights: make([]uint32, len(in.Endpoints)), Scheduler: "wrr"}
	for i, ep := range in.Endpoints {
		if !u[i] {
			continue
		}
		w := full
		if !ep.FirstSeen.IsZero() && window > 0 {
			age := max(0, in.Now.Sub(ep.FirstSeen)).Truncate(time.Millisecond)
			if age < window {
				res.Reevaluate = time.Second
				w = full * uint64(age.Milliseconds()) / uint64(window.Milliseconds())
				if w == 0 && full > 0 {
					w = 1
				}
			}
		}
		res.Weights[i] = uint32(w)
	}
	return res, nil
}
