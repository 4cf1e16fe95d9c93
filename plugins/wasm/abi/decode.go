package abi

import (
	"slices"
	"strings"
	"time"

	"github.com/switchyard-lb/switchyard/core/plugin"
)

// ErrInvalidOutput is wrapped by every error Decode returns: it is
// plugin.ErrPolicyInvalidOutput.
var ErrInvalidOutput = plugin.ErrPolicyInvalidOutput

// OutputError is Decode's error: every problem found in one output, so
// that a policy author fixes them in one go. It says "invalid policy
// output" once, and is ErrInvalidOutput. The policy stage reports an
// invalid result of any policy with the same type (plugin.CheckResult).
type OutputError = plugin.OutputError

// Decode validates a guest's output for an input of n endpoints and
// returns it as a PolicyResult. It reads out and keeps no reference to
// it. Its error is an *OutputError naming every problem it found; it
// stops early only where the header cannot be read (short, oversized, an
// unknown major version, a header size it cannot trust).
func Decode(out []byte, n int) (plugin.PolicyResult, error) {
	var res plugin.PolicyResult
	var ps plugin.Problems
	if len(out) < 8 {
		ps.Add("%d bytes, shorter than the output header", len(out))
		return res, ps.Err()
	}
	if len(out) > MaxOutputSize(n) {
		ps.Add("%d bytes, limit %d for %d endpoints", len(out), MaxOutputSize(n), n)
		return res, ps.Err()
	}
	if major := le.Uint16(out[outMajor:]); major != Major {
		ps.Add("ABI major version %d, want %d", major, Major)
		return res, ps.Err()
	}
	hs := le.Uint32(out[outHeaderSize:])
	if hs < OutputHeaderSize {
		ps.Add("header_size %d, want at least %d", hs, OutputHeaderSize)
		return res, ps.Err()
	}
	if uint64(hs) > uint64(len(out)) {
		ps.Add("header_size %d past the output's %d bytes", hs, len(out))
		return res, ps.Err()
	}
	if total := le.Uint32(out[outTotalSize:]); uint64(total) != uint64(len(out)) {
		ps.Add("total_size %d, but the guest returned %d bytes", total, len(out))
	}
	if count := le.Uint32(out[outCount:]); uint64(count) != uint64(n) {
		ps.Add("%d weights for %d endpoints", count, n)
	}
	woff := le.Uint32(out[outWeightsOff:])
	weightsOK := woff >= hs && uint64(woff)+4*uint64(n) <= uint64(len(out))
	if !weightsOK {
		ps.Add("weights at %d..%d outside %d..%d", woff, uint64(woff)+4*uint64(n), hs, len(out))
	}
	if ms := le.Uint32(out[outReevaluate:]); ms != 0 {
		if ms < MinReevaluateMS || ms > MaxReevaluateMS {
			ps.Add("reevaluate_ms %d outside %d..%d", ms, MinReevaluateMS, MaxReevaluateMS)
		}
		res.Reevaluate = time.Duration(ms) * time.Millisecond
	}
	sched, schedOK := outString(out, outScheduler, "scheduler", &ps)
	flags, flagsOK := outString(out, outFlags, "flags", &ps)
	if schedOK && flagsOK {
		validateScheduler(sched, flags, &ps)
	}
	if sched != "" {
		res.Scheduler = sched
		if flags != "" {
			res.Flags = strings.Split(flags, ",")
		}
	}
	if weightsOK {
		res.Weights = make([]uint32, n)
		for i := range res.Weights {
			res.Weights[i] = le.Uint32(out[int(woff)+4*i:])
		}
		plugin.CheckWeights(res.Weights, MaxWeight, &ps)
	}
	if err := ps.Err(); err != nil {
		return plugin.PolicyResult{}, err
	}
	return res, nil
}

// outString reads the string field at at; ok is false (and the problem
// added) when it lies past the output.
func outString(out []byte, at int, field string, ps *plugin.Problems) (s string, ok bool) {
	off, n := le.Uint32(out[at:]), le.Uint32(out[at+4:])
	if n == 0 {
		return "", true
	}
	if uint64(off)+uint64(n) > uint64(len(out)) {
		ps.Add("%s at %d..%d past the output's %d bytes", field, off, uint64(off)+uint64(n), len(out))
		return "", false
	}
	return string(out[off : off+n]), true
}

func validateScheduler(sched, flags string, ps *plugin.Problems) {
	if sched == "" {
		if flags != "" {
			ps.Add("scheduler flags %q without a scheduler", flags)
		}
		return
	}
	if len(sched) > MaxSchedulerLen || !slices.Contains(Schedulers, sched) {
		ps.Add("scheduler %.32q not one of %s", sched, strings.Join(Schedulers, " "))
		return
	}
	if flags == "" {
		return
	}
	list := strings.Split(flags, ",")
	if len(list) > MaxFlags {
		ps.Add("%d scheduler flags, limit %d", len(list), MaxFlags)
		return
	}
	allowed := schedulerFlags[sched]
	for i, f := range list {
		if !slices.Contains(allowed, f) {
			ps.Add("scheduler flag %.32q not allowed with %q", f, sched)
		}
		if slices.Contains(list[:i], f) {
			ps.Add("scheduler flag %q repeated", f)
		}
	}
}
