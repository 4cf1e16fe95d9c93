package scenario

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-lb/switchyard/core/plugin"
)

// DefaultTolerance is how far a share may be from the expected one when
// the scenario gives no tolerance.
const DefaultTolerance = 0.01

// Expect is what the policy should decide for the scenario. Every field
// is optional; only the fields given are checked.
type Expect struct {
	// Weights are the exact weights, in the order of the endpoints.
	Weights []uint32 `yaml:"weights"`
	// Shares are proportions: each endpoint's weight divided by the sum of
	// the weights (0 when every weight is 0), in the order of the
	// endpoints, each within Tolerance.
	Shares    []float64 `yaml:"shares"`
	Tolerance float64   `yaml:"tolerance"`
	// Scheduler and Flags are the IPVS scheduler the policy asks for.
	Scheduler string   `yaml:"scheduler"`
	Flags     []string `yaml:"flags"`
	// Reevaluate is the re-evaluation interval asked for (0s: none).
	Reevaluate *time.Duration `yaml:"reevaluate"`
	// Decline, when set, expects the policy to decline (or fail) with an
	// error containing this text.
	Decline string `yaml:"decline"`
}

func (e *Expect) check(endpoints int) error {
	if e.Weights != nil && len(e.Weights) != endpoints {
		return fmt.Errorf("weights has %d entries for %d endpoints", len(e.Weights), endpoints)
	}
	if e.Shares != nil && len(e.Shares) != endpoints {
		return fmt.Errorf("shares has %d entries for %d endpoints", len(e.Shares), endpoints)
	}
	for i, s := range e.Shares {
		if s < 0 || s > 1 {
			return fmt.Errorf("shares[%d] is %v: a share is from 0 to 1", i, s)
		}
	}
	if e.Tolerance < 0 || e.Tolerance >= 1 {
		return fmt.Errorf("tolerance is %v: want a number from 0 to 1", e.Tolerance)
	}
	if e.Decline != "" && (e.Weights != nil || e.Shares != nil || e.Scheduler != "" || e.Flags != nil || e.Reevaluate != nil) {
		return errors.New("decline excludes weights, shares, scheduler, flags and reevaluate")
	}
	return nil
}

// Check compares a decision (the result or the error of one evaluation of
// sc.Input()) with sc's expectations and returns the differences, one
// readable line each; none when it matches or sc expects nothing.
func (sc *Scenario) Check(res plugin.PolicyResult, evalErr error) []string {
	e := sc.Expect
	if e == nil {
		if evalErr != nil {
			return []string{fmt.Sprintf("the policy failed: %v", evalErr)}
		}
		return nil
	}
	if e.Decline != "" {
		switch {
		case evalErr == nil:
			return []string{fmt.Sprintf("the policy decided (weights %v), want a decline with %q", res.Weights, e.Decline)}
		case !strings.Contains(evalErr.Error(), e.Decline):
			return []string{fmt.Sprintf("the policy failed with %q, want a decline with %q", evalErr.Error(), e.Decline)}
		}
		return nil
	}
	if evalErr != nil {
		return []string{fmt.Sprintf("the policy failed: %v; want a decision", evalErr)}
	}
	var diffs []string
	for i := range sc.Endpoints {
		var got uint32
		if i < len(res.Weights) {
			got = res.Weights[i]
		}
		if e.Weights != nil && got != e.Weights[i] {
			diffs = append(diffs, fmt.Sprintf("%s: weight %d, want %d", sc.endpointName(i), got, e.Weights[i]))
		}
	}
	if e.Shares != nil {
		tol := e.Tolerance
		if tol == 0 {
			tol = DefaultTolerance
		}
		shares := Shares(res.Weights)
		for i := range sc.Endpoints {
			if math.Abs(shares[i]-e.Shares[i]) > tol {
				diffs = append(diffs, fmt.Sprintf("%s: share %.3f (weight %d of %d), want %v ± %v",
					sc.endpointName(i), shares[i], res.Weights[i], sum(res.Weights), e.Shares[i], tol))
			}
		}
	}
	if e.Scheduler != "" && res.Scheduler != e.Scheduler {
		diffs = append(diffs, fmt.Sprintf("scheduler %s, want %s", orNone(res.Scheduler, "(none: the Service's)"), e.Scheduler))
	}
	if e.Flags != nil && !slices.Equal(res.Flags, e.Flags) {
		diffs = append(diffs, fmt.Sprintf("scheduler flags %v, want %v", res.Flags, e.Flags))
	}
	if e.Reevaluate != nil && res.Reevaluate != *e.Reevaluate {
		diffs = append(diffs, fmt.Sprintf("reevaluate %v, want %v", res.Reevaluate, *e.Reevaluate))
	}
	return diffs
}

func (sc *Scenario) endpointName(i int) string {
	e := &sc.Endpoints[i]
	s := e.Addr().String()
	if e.Node != "" || e.Zone != "" {
		s += " (" + strings.Trim(e.Node+", "+e.Zone, ", ") + ")"
	}
	return s
}

func orNone(s, none string) string {
	if s == "" {
		return none
	}
	return s
}

func sum(w []uint32) uint64 {
	var t uint64
	for _, x := range w {
		t += uint64(x)
	}
	return t
}

// Shares are the weights as proportions of their sum (all 0 when the sum
// is 0).
func Shares(w []uint32) []float64 {
	s := make([]float64, len(w))
	if t := sum(w); t > 0 {
		for i, x := range w {
			s[i] = float64(x) / float64(t)
		}
	}
	return s
}

// Record is the expectation that exactly matches a decision: its weights,
// scheduler, flags and re-evaluation interval, or its error as a decline.
func Record(res plugin.PolicyResult, evalErr error) *Expect {
	if evalErr != nil {
		return &Expect{Decline: evalErr.Error()}
	}
	e := &Expect{Weights: slices.Clone(res.Weights), Scheduler: res.Scheduler, Flags: slices.Clone(res.Flags)}
	if e.Weights == nil {
		e.Weights = []uint32{}
	}
	r := res.Reevaluate
	e.Reevaluate = &r
	return e
}

// Rewrite returns the scenario file src with its top-level expect section
// replaced by e (appended when there is none); the rest of the file, its
// comments included, is kept as it was.
func Rewrite(src []byte, e *Expect) []byte {
	var out bytes.Buffer
	lines := strings.SplitAfter(string(src), "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if !strings.HasPrefix(l, "expect:") {
			out.WriteString(l)
			continue
		}
		// Skip the section: indented, blank and comment lines up to the
		// next top-level key.
		for i+1 < len(lines) {
			n := lines[i+1]
			if t := strings.TrimSpace(n); t != "" && !strings.HasPrefix(t, "#") && n[0] != ' ' && n[0] != '\t' {
				break
			}
			i++
		}
	}
	if out.Len() > 0 && !bytes.HasSuffix(out.Bytes(), []byte("\n")) {
		out.WriteByte('\n')
	}
	out.WriteString(e.yaml())
	return out.Bytes()
}

// yaml is e as a top-level expect section, lists in flow style.
func (e *Expect) yaml() string {
	var b strings.Builder
	b.WriteString("expect:\n")
	if e.Decline != "" {
		fmt.Fprintf(&b, "  decline: %s\n", strconv.Quote(e.Decline))
		return b.String()
	}
	if e.Weights != nil {
		ws := make([]string, len(e.Weights))
		for i, w := range e.Weights {
			ws[i] = strconv.FormatUint(uint64(w), 10)
		}
		fmt.Fprintf(&b, "  weights: [%s]\n", strings.Join(ws, ", "))
	}
	if e.Scheduler != "" {
		fmt.Fprintf(&b, "  scheduler: %s\n", yamlString(e.Scheduler))
	}
	if len(e.Flags) > 0 {
		fs := make([]string, len(e.Flags))
		for i, f := range e.Flags {
			fs[i] = yamlString(f)
		}
		fmt.Fprintf(&b, "  flags: [%s]\n", strings.Join(fs, ", "))
	}
	if e.Reevaluate != nil {
		fmt.Fprintf(&b, "  reevaluate: %s\n", *e.Reevaluate)
	}
	return b.String()
}

// yamlString is s as a YAML scalar: plain when it is a simple word (a
// scheduler or flag name), else double-quoted.
func yamlString(s string) string {
	for _, c := range s {
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '-' && c != '_' {
			return strconv.Quote(s)
		}
	}
	if s == "" || s == "true" || s == "false" || s == "null" || (s[0] >= '0' && s[0] <= '9') {
		return strconv.Quote(s)
	}
	return s
}
