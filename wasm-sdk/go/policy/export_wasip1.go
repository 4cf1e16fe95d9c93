//go:build wasip1

package policy

import "unsafe"

var (
	evaluator *Evaluator
	inBuf     []byte
)

// Register makes f the module's policy. Call it from an init function.
func Register(f Func) { evaluator = NewEvaluator(f) }

//go:wasmimport sy_v1 log
func hostLog(level uint32, ptr unsafe.Pointer, n uint32)

// Log levels.
const (
	LevelDebug = 0
	LevelInfo  = 1
	LevelWarn  = 2
	LevelError = 3
)

// Log sends a line to the daemon's log (rate limited by the host).
func Log(level uint32, msg string) {
	if len(msg) == 0 {
		return
	}
	hostLog(level, unsafe.Pointer(unsafe.StringData(msg)), uint32(len(msg)))
}

//go:wasmexport sy_abi_v1
func abiV1() {}

//go:wasmexport sy_alloc
func alloc(n uint32) unsafe.Pointer {
	if n == 0 {
		n = 1
	}
	if uint32(cap(inBuf)) < n {
		inBuf = make([]byte, n)
	}
	return unsafe.Pointer(unsafe.SliceData(inBuf))
}

//go:wasmexport sy_evaluate
func evaluate(ptr unsafe.Pointer, n uint32) uint64 {
	if evaluator == nil {
		Log(LevelError, "no policy registered: call policy.Register from an init function")
		return 0
	}
	out, err := evaluator.Run(unsafe.Slice((*byte)(ptr), n))
	if err != nil {
		Log(LevelError, err.Error())
		return 0
	}
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(out))))<<32 | uint64(len(out))
}
