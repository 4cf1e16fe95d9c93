package abi

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/switchyard-lb/switchyard/core/plugin"
)

// ErrInvalidOutput is wrapped by every error Decode returns.
var ErrInvalidOutput = errors.New("invalid policy output")

// OutputError is Decode's error: every problem found in one output, so
// that a policy author fixes them in one go. It says "invalid policy
// output" once, and is ErrInvalidOutput.
type OutputError struct {
	// Problems are the problems in the order of the output's fields.
	Problems []string
}

func (e *OutputError) Error() string {
	return ErrInvalidOutput.Error() + ": " + strings.Join(e.Problems, "; ")
}

// Is matches ErrInvalidOutput.
func (e *OutputError) Is(target error) bool { return target == ErrInvalidOutput }

// maxWeightProblems bounds the weights an OutputError names one by one.
const maxWeightProblems = 4

// problems collects an output's problems.
type problems []string

func (p *problems) add(format string, args ...any) { *p = append(*p, fmt.Sprintf(format, args...)) }

func (p problems) err() error {
	if len(p) == 0 {
		return nil
	}
	return &OutputError{Problems: p}
}

// Decode validates a guest's output for an input of n endpoints and
// returns it as a PolicyResult. It reads out and keeps no reference to
// it. Its error is an *OutputError naming every problem it found; it
// stops early only where the header cannot be read (short, oversized, an
// unknown major version, a header size it cannot trust).
func Decode(out []byte, n int) (plugin.PolicyResult, error) {
	var res plugin.PolicyResult
	var ps problems
	if len(out) < 8 {
		ps.add("%d bytes, shorter than the output header", len(out))
		return res, ps.err()
	}
	if len(out) > MaxOutputSize(n) {
		ps.add("%d bytes, limit %d for %d endpoints", len(out), MaxOutputSize(n), n)
		return res, ps.err()
	}
	if major := le.Uint16(out[outMajor:]); major != Major {
		ps.add("ABI major version %d, want %d", major, Major)
		return res, ps.err()
	}
	hs := le.Uint32(out[outHeaderSize:])
	if hs < OutputHeaderSize {
		ps.add("header_size %d, want at least %d", hs, OutputHeaderSize)
		return res, ps.err()
	}
	if uint64(hs) > uint64(len(out)) {
		ps.add("header_size %d past the output's %d bytes", hs, len(out))
		return res, ps.err()
	}
	if total := le.Uint32(out[outTotalSize:]); uint64(total) != uint64(len(out)) {
		ps.add("total_size %d, but the guest returned %d bytes", total, len(out))
	}
	if count := le.Uint32(out[outCount:]); uint64(count) != uint64(n) {
		ps.add("%d weights for %d endpoints", count, n)
	}
	woff := le.Uint32(out[outWeightsOff:])
	weightsOK := woff >= hs && uint64(woff)+4*uint64(n) <= uint64(len(out))
	if !weightsOK {
		ps.add("weights at %d..%d outside %d..%d", woff, uint64(woff)+4*uint64(n), hs, len(out))
	}
	if ms := le.Uint32(out[outReevaluate:]); ms != 0 {
		if ms < MinReevaluateMS || ms > MaxReevaluateMS {
			ps.add("reevaluate_ms %d outside %d..%d", ms, MinReevaluateMS, MaxReevaluateMS)
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
		over := 0
		for i := range res.Weights {
			w := le.Uint32(out[int(woff)+4*i:])
			if w > MaxWeight {
				if over++; over <= maxWeightProblems {
					ps.add("weight %d of endpoint %d above %d", w, i, MaxWeight)
				}
			}
			res.Weights[i] = w
		}
		if over > maxWeightProblems {
			ps.add("%d more weights above %d", over-maxWeightProblems, MaxWeight)
		}
	}
	if err := ps.err(); err != nil {
		return plugin.PolicyResult{}, err
	}
	return res, nil
}

// outString reads the string field at at; ok is false (and the problem
// added) when it lies past the output.
func outString(out []byte, at int, field string, ps *problems) (s string, ok bool) {
	off, n := le.Uint32(out[at:]), le.Uint32(out[at+4:])
	if n == 0 {
		return "", true
	}
	if uint64(off)+uint64(n) > uint64(len(out)) {
		ps.add("%s at %d..%d past the output's %d bytes", field, off, uint64(off)+uint64(n), len(out))
		return "", false
	}
	return string(out[off : off+n]), true
}

func validateScheduler(sched, flags string, ps *problems) {
	if sched == "" {
		if flags != "" {
			ps.add("scheduler flags %q without a scheduler", flags)
		}
		return
	}
	if len(sched) > MaxSchedulerLen || !slices.Contains(Schedulers, sched) {
		ps.add("scheduler %.32q not one of %s", sched, strings.Join(Schedulers, " "))
		return
	}
	if flags == "" {
		return
	}
	list := strings.Split(flags, ",")
	if len(list) > MaxFlags {
		ps.add("%d scheduler flags, limit %d", len(list), MaxFlags)
		return
	}
	allowed := schedulerFlags[sched]
	for i, f := range list {
		if !slices.Contains(allowed, f) {
			ps.add("scheduler flag %.32q not allowed with %q", f, sched)
		}
		if slices.Contains(list[:i], f) {
			ps.add("scheduler flag %q repeated", f)
		}
	}
}
