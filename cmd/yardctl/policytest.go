package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/switchyard-lb/switchyard/core/config"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/plugins/scenario"
	"github.com/switchyard-lb/switchyard/plugins/wasm"
)

// deadlineFlag declares --deadline, defaulting to the daemon's
// policies.evaluationDeadline default so every command measures what the
// daemon enforces.
func deadlineFlag(fs *flag.FlagSet) *time.Duration {
	return fs.Duration("deadline", config.DefaultEvaluationDeadline, deadlineUsage)
}

const deadlineUsage = "evaluation deadline (wall clock); the default is the daemon's policies.evaluationDeadline default"

// loadScenarios loads the scenario file at path, or every *.yaml and
// *.yml file directly in the directory at path, in name order.
func loadScenarios(path string) ([]*scenario.Scenario, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("read scenario: %w", err)
	}
	if !info.IsDir() {
		sc, err := scenario.Load(path)
		if err != nil {
			return nil, err
		}
		return []*scenario.Scenario{sc}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("read scenarios: %w", err)
	}
	var out []*scenario.Scenario
	for _, e := range entries {
		if e.IsDir() || (filepath.Ext(e.Name()) != ".yaml" && filepath.Ext(e.Name()) != ".yml") {
			continue
		}
		sc, err := scenario.Load(filepath.Join(path, e.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, sc)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no scenario files (*.yaml) in %s", path)
	}
	return out, nil
}

// readParams reads --params: a JSON file, or JSON given inline when it
// starts with '{'.
func readParams(arg string) ([]byte, error) {
	if arg == "" {
		return nil, nil
	}
	b := []byte(arg)
	if !strings.HasPrefix(strings.TrimSpace(arg), "{") {
		var err error
		if b, err = os.ReadFile(arg); err != nil {
			return nil, fmt.Errorf("read params: %w", err)
		}
	}
	if err := scenario.CheckParams(b); err != nil {
		return nil, fmt.Errorf("params %s: %w", arg, err)
	}
	return b, nil
}

// outcome is one evaluation of a scenario.
type outcome struct {
	sc    *scenario.Scenario
	in    *plugin.PolicyInput
	res   plugin.PolicyResult
	err   error
	diffs []string
}

func (o *outcome) failed() bool { return len(o.diffs) > 0 }

func evaluate(ctx context.Context, p *wasm.Policy, sc *scenario.Scenario) *outcome {
	o := &outcome{sc: sc, in: sc.Input()}
	o.res, o.err = p.Evaluate(ctx, o.in)
	if o.err != nil {
		// The host names the policy by its file name; the scenario's
		// expectations should not depend on it.
		if m, ok := strings.CutPrefix(o.err.Error(), fmt.Sprintf("policy %q: ", p.Name())); ok {
			o.err = renamedError{m, o.err}
		}
	}
	o.diffs = sc.Check(o.res, o.err)
	return o
}

// renamedError is err with another message.
type renamedError struct {
	msg string
	err error
}

func (e renamedError) Error() string { return e.msg }
func (e renamedError) Unwrap() error { return e.err }

// decisionJSON is one scenario's decision in `policy test -o json`.
type decisionJSON struct {
	Scenario     string           `json:"scenario,omitempty"`
	Scheduler    string           `json:"scheduler,omitempty"`
	Flags        []string         `json:"flags,omitempty"`
	ReevaluateMs int64            `json:"reevaluateMs,omitempty"`
	Endpoints    []endpointWeight `json:"endpoints"`
	// Error is the evaluation's error (a decline, a trap, an overrun).
	Error string `json:"error,omitempty"`
	// Result is pass or fail when the scenario has expectations,
	// updated with --update, else empty.
	Result string   `json:"result,omitempty"`
	Diffs  []string `json:"diffs,omitempty"`
}

type endpointWeight struct {
	Address netip.AddrPort `json:"address"`
	Weight  uint32         `json:"weight"`
}

func (o *outcome) json() decisionJSON {
	d := decisionJSON{Scenario: o.sc.Name, Endpoints: []endpointWeight{}, Diffs: o.diffs}
	if o.err != nil {
		d.Error = o.err.Error()
	} else {
		d.Scheduler, d.Flags, d.ReevaluateMs = o.res.Scheduler, o.res.Flags, o.res.Reevaluate.Milliseconds()
		for i, e := range o.in.Endpoints {
			d.Endpoints = append(d.Endpoints, endpointWeight{netip.AddrPortFrom(e.Addr, e.Port), o.res.Weights[i]})
		}
	}
	d.Result = o.result()
	return d
}

func (o *outcome) result() string {
	switch {
	case o.failed():
		return "fail"
	case o.sc.Expect != nil:
		return "pass"
	}
	return ""
}

// failure says how the evaluation failed: "declined: " and the policy's
// message, or "failed: " and the error (a trap, an overrun, invalid
// output).
func (o *outcome) failure() string {
	if msg, ok := strings.CutPrefix(o.err.Error(), plugin.ErrPolicyDeclined.Error()+": "); ok && errors.Is(o.err, plugin.ErrPolicyDeclined) {
		return "declined: " + msg
	}
	return "failed: " + o.err.Error()
}

// summary is the decision on one line.
func (o *outcome) summary() string {
	if o.err != nil {
		return oneLine(o.failure())
	}
	ws := make([]string, len(o.res.Weights))
	for i, w := range o.res.Weights {
		ws[i] = fmt.Sprint(w)
	}
	s := "weights [" + strings.Join(ws, " ") + "]"
	if o.res.Scheduler != "" {
		s += " scheduler " + strings.Join(append([]string{o.res.Scheduler}, o.res.Flags...), ",")
	}
	if o.res.Reevaluate > 0 {
		s += " reevaluate " + o.res.Reevaluate.String()
	}
	return s
}

// reportedError is a failure the command's output already shows: run
// prints it on stderr but never again as JSON.
type reportedError struct{ msg string }

func (e reportedError) Error() string { return e.msg }

var policyTest = &command{
	name:  "policy test",
	usage: " FILE --scenario S.yaml|DIR [--update]",
	long: "Runs FILE against a scenario (service, node, endpoints with their statistics; see\n" +
		"wasm-sdk/README.md) through the daemon's host, with the daemon's deadline, and prints\n" +
		"the decision: each endpoint's weight (0 drains), the IPVS scheduler and the\n" +
		"re-evaluation interval. A scenario's expect section (weights, shares with a tolerance,\n" +
		"scheduler, flags, reevaluate, or decline with part of the message) is checked: a\n" +
		"mismatch prints what differs and exits 1. --scenario DIR runs every *.yaml in DIR and\n" +
		"prints one line per scenario. --update records the current decisions as each\n" +
		"scenario's expectations (golden mode), rewriting only the expect section.",
	setup: func(fs *flag.FlagSet) func(context.Context, ioStreams, []string) error {
		output := outputFlag(fs)
		scenarioPath := fs.String("scenario", "", "scenario YAML file, or a directory of them (required)")
		deadline := deadlineFlag(fs)
		update := fs.Bool("update", false, "record the decisions as the scenarios' expectations instead of checking them")
		return func(ctx context.Context, s ioStreams, args []string) error {
			path, err := fileArg(*output, args)
			if err != nil {
				return err
			}
			if *scenarioPath == "" {
				return usageError{"--scenario is required"}
			}
			info, err := os.Stat(*scenarioPath)
			if err != nil {
				return fmt.Errorf("read scenario: %w", err)
			}
			scs, err := loadScenarios(*scenarioPath)
			if err != nil {
				return err
			}
			p, done, err := loadModule(ctx, path, *deadline)
			if err != nil {
				return err
			}
			defer done()
			var outs []*outcome
			failed := 0
			for _, sc := range scs {
				o := evaluate(ctx, p, sc)
				if *update {
					if err := updateScenario(sc.Name, o); err != nil {
						return err
					}
					o.diffs = nil
				}
				if o.failed() {
					failed++
				}
				outs = append(outs, o)
			}
			single := !info.IsDir()
			if single && !*update && outs[0].sc.Expect == nil && outs[0].err != nil {
				return outs[0].err
			}
			if *output == "json" {
				if single {
					err = writeJSON(s.out, outs[0].json())
				} else {
					all := struct {
						Scenarios []decisionJSON `json:"scenarios"`
						Failed    int            `json:"failed"`
					}{Failed: failed}
					for _, o := range outs {
						all.Scenarios = append(all.Scenarios, o.json())
					}
					err = writeJSON(s.out, all)
				}
			} else if single {
				err = printDecision(s.out, outs[0], *update)
			} else {
				err = printTable(s.out, outs, *update)
			}
			if err != nil {
				return err
			}
			if failed > 0 {
				return reportedError{fmt.Sprintf("%d of %d scenarios failed their expectations", failed, len(outs))}
			}
			return nil
		}
	},
}

func updateScenario(path string, o *outcome) error {
	src, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("update scenario: %w", err)
	}
	out := scenario.Rewrite(src, scenario.Record(o.res, o.err))
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return fmt.Errorf("update scenario: %w", err)
	}
	sc, err := scenario.Parse(path, out)
	if err != nil {
		return fmt.Errorf("update scenario: the rewritten file does not parse: %w", err)
	}
	o.sc = sc
	return nil
}

// printDecision prints one scenario's decision as a table, then whether
// it met its expectations.
func printDecision(w io.Writer, o *outcome, updated bool) error {
	if o.err != nil {
		fmt.Fprintln(w, o.failure())
	} else {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "ENDPOINT\tNODE\tZONE\tWEIGHT\n")
		for i, e := range o.in.Endpoints {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", netip.AddrPortFrom(e.Addr, e.Port), e.NodeName, e.Zone, o.res.Weights[i])
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		sched := o.res.Scheduler
		if sched == "" {
			sched = "(the Service's)"
		}
		fmt.Fprintf(w, "scheduler: %s %s\nreevaluate: %v\n", sched, strings.Join(o.res.Flags, ","), o.res.Reevaluate)
	}
	var err error
	switch {
	case updated:
		_, err = fmt.Fprintf(w, "expect: recorded in %s\n", o.sc.Name)
	case o.failed():
		_, err = fmt.Fprintf(w, "expect: FAIL\n  %s\n", strings.Join(o.diffs, "\n  "))
	case o.sc.Expect != nil:
		_, err = fmt.Fprintf(w, "expect: pass\n")
	}
	return err
}

// printTable prints one line per scenario, then what differs for each
// that failed.
func printTable(w io.Writer, outs []*outcome, updated bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "SCENARIO\tRESULT\tDECISION\n")
	for _, o := range outs {
		r := o.result()
		switch {
		case updated:
			r = "updated"
		case r == "":
			r = "-"
		case r == "fail":
			r = "FAIL"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", filepath.Base(o.sc.Name), r, o.summary())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, o := range outs {
		if o.failed() {
			if _, err := fmt.Fprintf(w, "\n%s:\n  %s\n", o.sc.Name, strings.Join(o.diffs, "\n  ")); err != nil {
				return err
			}
		}
	}
	return nil
}

var policyBench = &command{
	name:  "policy bench",
	usage: " FILE",
	long: "Measures evaluations of FILE with every guard on (deadline, memory cap, output\n" +
		"checks), over a scenario or over synthetic endpoints: the mean, the 50th, 90th and 99th\n" +
		"percentiles and the slowest call, and the host's allocations per evaluation. It fails\n" +
		"when an evaluation runs past --deadline, as it would in the daemon.",
	setup: func(fs *flag.FlagSet) func(context.Context, ioStreams, []string) error {
		output := outputFlag(fs)
		scenarioPath := fs.String("scenario", "", "scenario YAML file; default: --endpoints synthetic endpoints")
		endpoints := fs.Int("endpoints", 50, "synthetic endpoints when no --scenario is given")
		duration := fs.Duration("duration", time.Second, "how long to measure")
		deadline := deadlineFlag(fs)
		return func(ctx context.Context, s ioStreams, args []string) error {
			path, err := fileArg(*output, args)
			if err != nil {
				return err
			}
			sc := scenario.Synthetic(*endpoints)
			if *scenarioPath != "" {
				if sc, err = scenario.Load(*scenarioPath); err != nil {
					return err
				}
			}
			in := sc.Input()
			p, done, err := loadModule(ctx, path, *deadline)
			if err != nil {
				return err
			}
			defer done()
			if _, err := p.Evaluate(ctx, in); err != nil { // warm up
				return err
			}
			res, err := bench(ctx, p, in, *duration)
			if err != nil {
				return err
			}
			res.DeadlineMs = deadline.Milliseconds()
			if *output == "json" {
				return writeJSON(s.out, res)
			}
			_, err = fmt.Fprintf(s.out, "%d endpoints: %d evaluations under a %v deadline\n"+
				"per evaluation: mean %v, p50 %v, p90 %v, p99 %v, max %v\n"+
				"host allocations per evaluation: %d (%d bytes)\n",
				res.Endpoints, res.Evaluations, *deadline,
				time.Duration(res.NsPerEvaluation), time.Duration(res.P50Ns), time.Duration(res.P90Ns),
				time.Duration(res.P99Ns), time.Duration(res.MaxNs), res.AllocsPerEvaluation, res.BytesPerEvaluation)
			return err
		}
	},
}

// benchResult is what `policy bench -o json` prints; times in ns.
type benchResult struct {
	Endpoints           int    `json:"endpoints"`
	Evaluations         int    `json:"evaluations"`
	DeadlineMs          int64  `json:"deadlineMs"`
	NsPerEvaluation     int64  `json:"nsPerEvaluation"`
	P50Ns               int64  `json:"p50Ns"`
	P90Ns               int64  `json:"p90Ns"`
	P99Ns               int64  `json:"p99Ns"`
	MaxNs               int64  `json:"maxNs"`
	AllocsPerEvaluation uint64 `json:"allocsPerEvaluation"`
	BytesPerEvaluation  uint64 `json:"bytesPerEvaluation"`
}

// bench evaluates in repeatedly for d (at least once), timing each call.
func bench(ctx context.Context, p *wasm.Policy, in *plugin.PolicyInput, d time.Duration) (benchResult, error) {
	times := make([]time.Duration, 0, 1<<16)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	for len(times) == 0 || time.Since(start) < d {
		t0 := time.Now()
		if _, err := p.Evaluate(ctx, in); err != nil {
			return benchResult{}, err
		}
		times = append(times, time.Since(t0))
	}
	total := time.Since(start)
	runtime.ReadMemStats(&after)
	n := len(times)
	// The slice of timings grows while measuring; its own allocations are
	// a few per doubling, negligible against n.
	res := benchResult{
		Endpoints: len(in.Endpoints), Evaluations: n, NsPerEvaluation: total.Nanoseconds() / int64(n),
		AllocsPerEvaluation: (after.Mallocs - before.Mallocs) / uint64(n),
		BytesPerEvaluation:  (after.TotalAlloc - before.TotalAlloc) / uint64(n),
	}
	slices.Sort(times)
	pct := func(q float64) int64 { return times[min(n-1, int(q*float64(n)))].Nanoseconds() }
	res.P50Ns, res.P90Ns, res.P99Ns, res.MaxNs = pct(0.50), pct(0.90), pct(0.99), times[n-1].Nanoseconds()
	return res, nil
}
