package conformance

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// The proxies make conformance compares, by the names CONFORMANCE_PROXIES
// takes.
const (
	KubeProxyIPVS     = "kube-proxy-ipvs"
	KubeProxyNFTables = "kube-proxy-nftables"
	Switchyard        = "switchyard"
)

// Columns are the table's proxy columns, in order, with their titles.
var Columns = []struct{ Proxy, Title string }{
	{KubeProxyIPVS, "kube-proxy IPVS"},
	{KubeProxyNFTables, "kube-proxy nftables"},
	{Switchyard, "Switchyard"},
}

// Filter selects specs as e2e.test's --ginkgo.focus and --ginkgo.skip
// do, on the spec's full name.
type Filter struct {
	Focus, Skip *regexp.Regexp
}

// NewFilter compiles focus and skip (skip may be empty).
func NewFilter(focus, skip string) (Filter, error) {
	var f Filter
	var err error
	if f.Focus, err = regexp.Compile(focus); err != nil {
		return Filter{}, fmt.Errorf("conformance: focus: %w", err)
	}
	if skip != "" {
		if f.Skip, err = regexp.Compile(skip); err != nil {
			return Filter{}, fmt.Errorf("conformance: skip: %w", err)
		}
	}
	return f, nil
}

// Match reports whether spec is one the filter runs.
func (f Filter) Match(spec string) bool {
	return f.Focus.MatchString(spec) && (f.Skip == nil || !f.Skip.MatchString(spec))
}

// ran reports whether r is a spec that ran, or was skipped by the spec
// itself (with a reason), rather than filtered out by the focus of the
// run that produced it.
func ran(r Result) bool { return r.Outcome != Skip || r.Reason != "" }

// Table renders the proxies' results as one Markdown table: a row per
// spec f matches that ran for at least one proxy (and per failed suite
// node: then the specs did not run), sorted by name, a column per proxy
// (Columns), then a row of totals. A proxy without a result for a spec
// shows "not run".
func Table(runs map[string][]Result, f Filter) string {
	cells := map[string]map[string]Result{} // spec -> proxy -> result
	for proxy, results := range runs {
		for _, r := range results {
			if r.Setup && r.Outcome != Fail || !r.Setup && (!f.Match(r.Spec) || !ran(r)) {
				continue
			}
			if cells[r.Spec] == nil {
				cells[r.Spec] = map[string]Result{}
			}
			cells[r.Spec][proxy] = r
		}
	}
	specs := make([]string, 0, len(cells))
	for s := range cells {
		specs = append(specs, s)
	}
	slices.Sort(specs)

	var b strings.Builder
	b.WriteString("| spec |")
	for _, c := range Columns {
		b.WriteString(" " + c.Title + " |")
	}
	b.WriteString("\n|---|")
	b.WriteString(strings.Repeat("---|", len(Columns)))
	b.WriteString("\n")
	type count struct{ pass, fail, skip, stopped int }
	totals := make([]count, len(Columns))
	for _, s := range specs {
		b.WriteString("| " + escape(s) + " |")
		for i, c := range Columns {
			r, ok := cells[s][c.Proxy]
			switch {
			case !ok:
				b.WriteString(" not run |")
				continue
			case r.Outcome == Pass:
				totals[i].pass++
			case r.Outcome == Fail:
				totals[i].fail++
			case r.Outcome == Interrupted:
				totals[i].stopped++
			default:
				totals[i].skip++
			}
			b.WriteString(" " + escape(cell(r)) + " |")
		}
		b.WriteString("\n")
	}
	b.WriteString("| **total** (pass/fail/skip) |")
	for _, t := range totals {
		fmt.Fprintf(&b, " %d/%d/%d", t.pass, t.fail, t.skip)
		if t.stopped > 0 {
			fmt.Fprintf(&b, ", %d stopped", t.stopped)
		}
		b.WriteString(" |")
	}
	b.WriteString("\n")
	return b.String()
}

// cell is one result: "pass (34s)", "FAIL (95s): reason", "skip: reason".
func cell(r Result) string {
	switch r.Outcome {
	case Pass:
		return fmt.Sprintf("pass (%s)", r.Duration.Round(time.Second))
	case Fail:
		return strings.TrimSuffix(fmt.Sprintf("FAIL (%s): %s", r.Duration.Round(time.Second), r.Reason), ": ")
	case Interrupted:
		return fmt.Sprintf("stopped by hand after %s", r.Duration.Round(time.Second))
	default:
		return "skip: " + r.Reason
	}
}

// escape keeps a cell in its column.
func escape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// rank orders what a chunk says of a spec: not run, stopped by hand, a
// result.
func rank(r Result) int {
	switch {
	case !ran(r):
		return 0
	case r.Outcome == Interrupted:
		return 1
	}
	return 2
}

// Merge joins the runs of several stored result sets (chunks of one
// selection, run one after the other) into one, per proxy: a spec keeps
// the result of the last set in which it ran (passed, failed or skipped
// itself), else of the last that was stopped inside it; a spec that no
// set ran keeps its "not run" entry. Suite nodes
// (Setup) merge by name the same way.
func Merge(sets ...map[string][]Result) map[string][]Result {
	type key struct {
		spec  string
		setup bool
	}
	out := map[string][]Result{}
	for _, c := range Columns {
		var order []key
		last := map[key]Result{}
		for _, set := range sets {
			for _, r := range set[c.Proxy] {
				k := key{r.Spec, r.Setup}
				prev, seen := last[k]
				if !seen {
					order = append(order, k)
				}
				if !seen || rank(r) >= rank(prev) {
					last[k] = r
				}
			}
		}
		for _, k := range order {
			out[c.Proxy] = append(out[c.Proxy], last[k])
		}
	}
	return out
}
