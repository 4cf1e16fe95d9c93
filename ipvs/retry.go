package ipvs

import (
	"errors"
	"fmt"
)

// ErrInterrupted is wrapped by the kernel interfaces' reads when the
// kernel flagged their dump as interrupted by concurrent changes
// (NLM_F_DUMP_INTR): whatever they return with it may be incomplete or
// inconsistent. The dataplane reads again (retryDump).
var ErrInterrupted = errors.New("dump interrupted by concurrent changes")

// dumpAttempts bounds retryDump: an interruption needs a change racing
// the dump, so several in a row mean a kernel object changing nonstop,
// which the next Apply (a retry of the runner) meets again later.
const dumpAttempts = 5

// retryDump calls read until it returns an error that is not
// ErrInterrupted, at most dumpAttempts times. After the last interrupted
// attempt it returns that attempt's results and an error wrapping
// ErrInterrupted, so that a caller that can use partial results (a best
// effort deletion) still may.
func retryDump[T any](read func() (T, error)) (T, error) {
	var (
		v   T
		err error
	)
	for range dumpAttempts {
		v, err = read()
		if !errors.Is(err, ErrInterrupted) {
			return v, err
		}
	}
	return v, fmt.Errorf("%w (%d attempts)", err, dumpAttempts)
}
