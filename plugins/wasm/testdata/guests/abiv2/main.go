//go:build wasip1

// Command abiv2 pretends to be built for a future ABI v2.
package main

import "unsafe"

var in []byte

//go:wasmexport sy_abi_v2
func marker() {}

//go:wasmexport sy_alloc
func alloc(n uint32) unsafe.Pointer {
	in = make([]byte, n)
	return unsafe.Pointer(&in[0])
}

//go:wasmexport sy_evaluate
func evaluate(ptr unsafe.Pointer, n uint32) uint64 { return 0 }

func main() {}
