//go:build wasip1

// Command hostile is a test policy written against the raw ABI. Its
// params select a behaviour: "" (or anything unknown) answers weight 1 for
// every endpoint; the others misbehave as their names say.
package main

import (
	"encoding/binary"
	"unsafe"
)

var le = binary.LittleEndian

//go:wasmimport sy_v1 log
func hostLog(level uint32, ptr unsafe.Pointer, n uint32)

var (
	in   []byte
	out  []byte
	sink [][]byte
)

//go:wasmexport sy_abi_v1
func marker() {}

// ticks counts sy_on_tick calls; mode "ticks" answers it as every weight.
var ticks uint32

//go:wasmexport sy_on_tick
func onTick() { ticks++ }

//go:wasmexport sy_alloc
func alloc(n uint32) unsafe.Pointer {
	in = make([]byte, n)
	return unsafe.Pointer(&in[0])
}

func log(s string) {
	b := []byte(s)
	hostLog(2, unsafe.Pointer(&b[0]), uint32(len(b)))
}

func ret(b []byte) uint64 {
	return uint64(uintptr(unsafe.Pointer(&b[0])))<<32 | uint64(len(b))
}

//go:wasmexport sy_evaluate
func evaluate(ptr unsafe.Pointer, n uint32) uint64 {
	buf := unsafe.Slice((*byte)(ptr), n)
	count := le.Uint32(buf[12:])
	poff, plen := le.Uint32(buf[88:]), le.Uint32(buf[92:])
	mode := string(buf[poff : poff+plen])
	weights := count
	major := uint16(1)
	switch mode {
	case "loop":
		for {
		}
	case "panic":
		panic("policy bug")
	case "oom":
		for {
			sink = append(sink, make([]byte, 1<<20))
		}
	case "decline":
		log("cannot decide")
		return 0
	case "garbage":
		out = []byte("this is not an output header at all")
		return ret(out)
	case "oversize":
		out = make([]byte, 1<<20)
		return ret(out)
	case "outside":
		return 0xfff00000<<32 | 64
	case "badversion":
		major = 2
	case "count":
		weights = count + 1
	case "log":
		for range 100 {
			log("noisy")
		}
	case "stderr":
		println("hello from stderr")
	}
	size := 40 + 4*weights
	if cap(out) < int(size) {
		out = make([]byte, size)
	}
	out = out[:size]
	clear(out)
	le.PutUint16(out[0:], major)
	le.PutUint32(out[4:], 40)
	le.PutUint32(out[8:], size)
	le.PutUint32(out[12:], weights)
	le.PutUint32(out[16:], 40)
	w := uint32(1)
	if mode == "ticks" {
		w = ticks
	}
	for i := range weights {
		le.PutUint32(out[40+4*i:], w)
	}
	return ret(out)
}

func main() {}
