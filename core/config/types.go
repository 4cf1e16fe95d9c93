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
