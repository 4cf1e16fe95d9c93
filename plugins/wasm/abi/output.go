package abi

import (
	"slices"
	"strings"

	"github.com/switchyard-lb/switchyard/core/plugin"
)

// EncodeOutput writes res as an ABI v1 output into dst (overwriting it)
// and returns it: what a guest returns, for tests and tools. It does not
// validate; Decode does.
func EncodeOutput(dst []byte, res plugin.PolicyResult) []byte {
	flags := strings.Join(res.Flags, ",")
	n := len(res.Weights)
	woff := OutputHeaderSize
	soff := woff + 4*n
	total := soff + len(res.Scheduler) + len(flags)
	b := slices.Grow(dst[:0], total)[:total]
	clear(b[:OutputHeaderSize])
	le.PutUint16(b[outMajor:], Major)
	le.PutUint16(b[outMinor:], Minor)
	le.PutUint32(b[outHeaderSize:], OutputHeaderSize)
	le.PutUint32(b[outTotalSize:], uint32(total))
	le.PutUint32(b[outCount:], uint32(n))
	le.PutUint32(b[outWeightsOff:], uint32(woff))
	le.PutUint32(b[outReevaluate:], uint32(res.Reevaluate.Milliseconds()))
	for i, w := range res.Weights {
		le.PutUint32(b[woff+4*i:], w)
	}
	w := writer{b: b, next: soff}
	w.str(outScheduler, res.Scheduler)
	w.str(outFlags, flags)
	return b
}
