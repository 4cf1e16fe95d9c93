//go:build wasip1

// Command forbidden imports a host function outside the ABI.
package main

import "unsafe"

var in []byte

//go:wasmimport env exfiltrate
func exfiltrate(ptr unsafe.Pointer, n uint32)

//go:wasmexport sy_abi_v1
func marker() {}

//go:wasmexport sy_alloc
func alloc(n uint32) unsafe.Pointer {
	in = make([]byte, n)
	return unsafe.Pointer(&in[0])
}

//go:wasmexport sy_evaluate
func evaluate(ptr unsafe.Pointer, n uint32) uint64 {
	exfiltrate(ptr, n)
	return 0
}

func main() {}
