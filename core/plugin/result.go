package plugin

import (
	"fmt"
	"strings"
)

// OutputError is a policy result refused: every problem found in it, so
// that a policy author fixes them in one go, behind one "invalid policy
// output" prefix. It is ErrPolicyInvalidOutput. The WebAssembly host's
// decoder (plugins/wasm/abi) and the policy stage's CheckResult, which
// every policy's result passes, both report with it.
type OutputError struct {
	// Problems are in the order of the result's fields.
	Problems []string
}

func (e *OutputError) Error() string {
	return ErrPolicyInvalidOutput.Error() + ": " + strings.Join(e.Problems, "; ")
}

// Is matches ErrPolicyInvalidOutput.
func (e *OutputError) Is(target error) bool { return target == ErrPolicyInvalidOutput }

// Problems collects the problems of one policy result.
type Problems []string

// Add appends a problem.
func (p *Problems) Add(format string, args ...any) { *p = append(*p, fmt.Sprintf(format, args...)) }

// Err returns the problems as an *OutputError, nil when there are none.
func (p Problems) Err() error {
	if len(p) == 0 {
		return nil
	}
	return &OutputError{Problems: p}
}

// maxWeightProblems bounds the weights CheckWeights names one by one.
const maxWeightProblems = 4

// CheckWeights adds a problem for each weight above limit, naming the
// first few and counting the rest.
func CheckWeights(weights []uint32, limit uint32, ps *Problems) {
	over := 0
	for i, w := range weights {
		if w > limit {
			if over++; over <= maxWeightProblems {
				ps.Add("weight %d of endpoint %d above %d", w, i, limit)
			}
		}
	}
	if over > maxWeightProblems {
		ps.Add("%d more weights above %d", over-maxWeightProblems, limit)
	}
}

// MaxWeight is the largest weight a dataplane programs (IPVS takes a
// signed 32-bit weight).
const MaxWeight = 1<<31 - 1

// CheckResult returns an *OutputError naming every problem of res as a
// decision for n endpoints on a dataplane that supports schedulers (nil:
// none), or nil when res is valid.
func CheckResult(res PolicyResult, n int, schedulers SchedulerSet) error {
	var ps Problems
	if len(res.Weights) != n {
		ps.Add("%d weights for %d endpoints", len(res.Weights), n)
	}
	CheckWeights(res.Weights, MaxWeight, &ps)
	switch {
	case res.Scheduler == "" && len(res.Flags) > 0:
		ps.Add("scheduler flags %s without a scheduler", strings.Join(res.Flags, ","))
	case res.Scheduler != "" && (schedulers == nil || !schedulers.SupportsScheduler(res.Scheduler)):
		ps.Add("scheduler %q is not one the dataplane supports", res.Scheduler)
	}
	if res.Reevaluate < 0 {
		ps.Add("negative re-evaluation interval %v", res.Reevaluate)
	}
	return ps.Err()
}
