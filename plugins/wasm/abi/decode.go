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

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidOutput}, args...)...)
}

// Decode validates a guest's output for an input of n endpoints and
// returns it as a PolicyResult. It reads out and keeps no reference to it.
func Decode(out []byte, n int) (plugin.PolicyResult, error) {
	var res plugin.PolicyResult
	if len(out) < 8 {
		return res, invalid("%d bytes, shorter than the output header", len(out))
	}
	if len(out) > MaxOutputSize(n) {
		return res, invalid("%d bytes, limit %d for %d endpoints", len(out), MaxOutputSize(n), n)
	}
	if major := le.Uint16(out[outMajor:]); major != Major {
		return res, invalid("ABI major version %d, want %d", major, Major)
	}
	hs := le.Uint32(out[outHeaderSize:])
	if hs < OutputHeaderSize {
		return res, invalid("header_size %d, want at least %d", hs, OutputHeaderSize)
	}
	if uint64(hs) > uint64(len(out)) {
		return res, invalid("header_size %d past the output's %d bytes", hs, len(out))
	}
	if total := le.Uint32(out[outTotalSize:]); uint64(total) != uint64(len(out)) {
		return res, invalid("total_size %d, but the guest returned %d bytes", total, len(out))
	}
	if count := le.Uint32(out[outCount:]); uint64(count) != uint64(n) {
		return res, invalid("%d weights for %d endpoints", count, n)
	}
	woff := le.Uint32(out[outWeightsOff:])
	if woff < hs || uint64(woff)+4*uint64(n) > uint64(len(out)) {
		return res, invalid("weights at %d..%d outside %d..%d", woff, uint64(woff)+4*uint64(n), hs, len(out))
	}
	if ms := le.Uint32(out[outReevaluate:]); ms != 0 {
		if ms < MinReevaluateMS || ms > MaxReevaluateMS {
			return res, invalid("reevaluate_ms %d outside %d..%d", ms, MinReevaluateMS, MaxReevaluateMS)
		}
		res.Reevaluate = time.Duration(ms) * time.Millisecond
	}
	sched, err := outString(out, outScheduler, "scheduler")
	if err != nil {
		return res, err
	}
	flags, err := outString(out, outFlags, "flags")
	if err != nil {
		return res, err
	}
	if err := validateScheduler(sched, flags); err != nil {
		return res, err
	}
	if sched != "" {
		res.Scheduler = sched
		if flags != "" {
			res.Flags = strings.Split(flags, ",")
		}
	}

	res.Weights = make([]uint32, n)
	for i := range res.Weights {
		w := le.Uint32(out[int(woff)+4*i:])
		if w > MaxWeight {
			return plugin.PolicyResult{}, invalid("weight %d of endpoint %d above %d", w, i, MaxWeight)
		}
		res.Weights[i] = w
	}
	return res, nil
}

func outString(out []byte, at int, field string) (string, error) {
	off, n := le.Uint32(out[at:]), le.Uint32(out[at+4:])
	if n == 0 {
		return "", nil
	}
	if uint64(off)+uint64(n) > uint64(len(out)) {
		return "", invalid("%s at %d..%d past the output's %d bytes", field, off, uint64(off)+uint64(n), len(out))
	}
	return string(out[off : off+n]), nil
}

func validateScheduler(sched, flags string) error {
	if sched == "" {
		if flags != "" {
			return invalid("scheduler flags %q without a scheduler", flags)
		}
		return nil
	}
	if len(sched) > MaxSchedulerLen || !slices.Contains(Schedulers, sched) {
		return invalid("scheduler %.32q not one of %s", sched, strings.Join(Schedulers, " "))
	}
	if flags == "" {
		return nil
	}
	list := strings.Split(flags, ",")
	if len(list) > MaxFlags {
		return invalid("%d scheduler flags, limit %d", len(list), MaxFlags)
	}
	allowed := schedulerFlags[sched]
	for i, f := range list {
		if !slices.Contains(allowed, f) {
			return invalid("scheduler flag %.32q not allowed with %q", f, sched)
		}
		if slices.Contains(list[:i], f) {
			return invalid("scheduler flag %q repeated", f)
		}
	}
	return nil
}
