package config

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"
)

// Duration is a time.Duration written as a Go duration string ("30s",
// "1m30s", "250ms").
type Duration time.Duration

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText writes d as a Go duration string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalYAML parses a Go duration string. A bad value is recorded
// against the field's path when decoding through Parse, so that every
// bad value is reported, not only the first.
func (d *Duration) UnmarshalYAML(ctx context.Context, n ast.Node) error {
	s, ok := scalarString(n)
	if !ok {
		return report(ctx, n, "want a duration string such as \"30s\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return report(ctx, n, fmt.Sprintf("invalid duration %q (want a Go duration such as \"30s\" or \"1m30s\")", s))
	}
	*d = Duration(v)
	return nil
}

// Prefix is a netip.Prefix written in CIDR notation ("10.0.0.0/8").
type Prefix netip.Prefix

// Std returns p as a netip.Prefix.
func (p Prefix) Std() netip.Prefix { return netip.Prefix(p) }

func (p Prefix) String() string { return netip.Prefix(p).String() }

// MarshalText writes p in CIDR notation.
func (p Prefix) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalYAML parses a CIDR; like Duration, a bad value is recorded
// against its path.
func (p *Prefix) UnmarshalYAML(ctx context.Context, n ast.Node) error {
	s, ok := scalarString(n)
	if !ok {
		return report(ctx, n, "want a CIDR string such as \"10.0.0.0/8\"")
	}
	v, err := netip.ParsePrefix(s)
	if err != nil {
		return report(ctx, n, fmt.Sprintf("invalid CIDR %q", s))
	}
	if v != v.Masked() {
		return report(ctx, n, fmt.Sprintf("invalid CIDR %q: host bits set (want %s)", s, v.Masked()))
	}
	*p = Prefix(v)
	return nil
}

// Prefixes converts to netip.Prefix values.
func Prefixes(ps []Prefix) []netip.Prefix {
	if len(ps) == 0 {
		return nil
	}
	out := make([]netip.Prefix, len(ps))
	for i, p := range ps {
		out[i] = netip.Prefix(p)
	}
	return out
}

// ByteSize is a number of bytes, written as an integer or with a Ki, Mi
// or Gi suffix ("32Mi").
type ByteSize uint64

var byteUnits = []struct {
	suffix string
	shift  uint
}{{"Gi", 30}, {"Mi", 20}, {"Ki", 10}}

func (b ByteSize) String() string {
	for _, u := range byteUnits {
		if b != 0 && b%(1<<u.shift) == 0 {
			return strconv.FormatUint(uint64(b)>>u.shift, 10) + u.suffix
		}
	}
	return strconv.FormatUint(uint64(b), 10)
}

// MarshalText writes b with the largest exact suffix.
func (b ByteSize) MarshalText() ([]byte, error) { return []byte(b.String()), nil }

// ParseByteSize parses an integer with an optional Ki, Mi or Gi suffix.
func ParseByteSize(s string) (ByteSize, error) {
	num, shift := s, uint(0)
	for _, u := range byteUnits {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			num, shift = rest, u.shift
			break
		}
	}
	v, err := strconv.ParseUint(num, 10, 64)
	if err != nil || v > math.MaxUint64>>shift {
		return 0, fmt.Errorf("invalid size %q (want bytes, or a number with Ki, Mi or Gi)", s)
	}
	return ByteSize(v << shift), nil
}

// UnmarshalYAML parses a size; like Duration, a bad value is recorded
// against its path.
func (b *ByteSize) UnmarshalYAML(ctx context.Context, n ast.Node) error {
	s, ok := scalarString(n)
	if !ok {
		return report(ctx, n, "want a size such as \"32Mi\"")
	}
	v, err := ParseByteSize(s)
	if err != nil {
		return report(ctx, n, err.Error())
	}
	*b = v
	return nil
}

// scalarString returns the text of a string or integer scalar.
func scalarString(n ast.Node) (string, bool) {
	switch n := n.(type) {
	case *ast.StringNode:
		return n.Value, true
	case *ast.IntegerNode:
		return n.GetToken().Value, true
	}
	return "", false
}

type collectorKey struct{}

// collector gathers value errors during one decode.
type collector struct{ errs []*FieldError }

// report records a bad value at node n when decoding through Parse, and
// returns it as the decode error otherwise.
func report(ctx context.Context, n ast.Node, msg string) error {
	fe := &FieldError{Path: nodePath(n), Line: nodeLine(n), Msg: msg}
	if c, ok := ctx.Value(collectorKey{}).(*collector); ok {
		c.errs = append(c.errs, fe)
		return nil
	}
	return fe
}

func nodePath(n ast.Node) string {
	p := strings.TrimPrefix(n.GetPath(), "$")
	return strings.TrimPrefix(p, ".")
}

func nodeLine(n ast.Node) int {
	if d, ok := n.(*ast.DocumentNode); ok && d.Body == nil {
		// An empty document ("a: 1\n---\n"): its GetToken would
		// dereference the missing body.
		if d.Start != nil && d.Start.Position != nil {
			return d.Start.Position.Line
		}
		return 0
	}
	if tk := n.GetToken(); tk != nil && tk.Position != nil {
		return tk.Position.Line
	}
	return 0
}

// NodePortPrimary is the keyword of nodePortAddresses that selects the
// node's primary addresses, as kube-proxy's --nodeport-addresses=primary.
const NodePortPrimary = "primary"

// NodePortAddress is one entry of nodePortAddresses: a CIDR, or the
// keyword "primary" (Primary true, Prefix zero).
type NodePortAddress struct {
	Prefix  netip.Prefix
	Primary bool
}

func (a NodePortAddress) String() string {
	if a.Primary {
		return NodePortPrimary
	}
	return a.Prefix.String()
}

// MarshalText writes a as the config spells it.
func (a NodePortAddress) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// UnmarshalYAML parses "primary" or a CIDR; like Duration, a bad value is
// recorded against its path.
func (a *NodePortAddress) UnmarshalYAML(ctx context.Context, n ast.Node) error {
	if s, ok := scalarString(n); ok && s == NodePortPrimary {
		*a = NodePortAddress{Primary: true}
		return nil
	}
	var p Prefix
	if err := p.UnmarshalYAML(ctx, n); err != nil {
		return err
	}
	*a = NodePortAddress{Prefix: p.Std()}
	return nil
}

// NodePortAddresses selects the node addresses that carry NodePorts: CIDRs
// (an address of a family is used when it lies in one of that family's
// CIDRs, or always when none is of its family), or the single keyword
// "primary" (the node's primary address of each family), as kube-proxy's
// nodePortAddresses. Empty: every node address.
type NodePortAddresses []NodePortAddress

// Primary reports whether the list is the keyword "primary".
func (as NodePortAddresses) Primary() bool { return len(as) == 1 && as[0].Primary }

// Prefixes returns the CIDRs of the list, nil when it has none.
func (as NodePortAddresses) Prefixes() []netip.Prefix {
	var out []netip.Prefix
	for _, a := range as {
		if !a.Primary {
			out = append(out, a.Prefix)
		}
	}
	return out
}

// validate refuses "primary" anywhere but alone, as kube-proxy does.
func (as NodePortAddresses) validate(v *validator, path string) {
	for i, a := range as {
		if a.Primary && len(as) > 1 {
			v.add(fmt.Sprintf("%s[%d]", path, i), "%q cannot be mixed with CIDRs: use [%s] alone, or list CIDRs only",
				NodePortPrimary, NodePortPrimary)
			return
		}
	}
}
