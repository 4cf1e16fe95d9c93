//go:build wasm

package policy

import "unsafe"

// WebAssembly is little-endian and allows unaligned loads: read the
// ABI's integers with one load each instead of byte by byte.

func u16at(b []byte, i int) uint16 {
	_ = b[i+1]
	return *(*uint16)(unsafe.Pointer(&b[i]))
}

func u32at(b []byte, i int) uint32 {
	_ = b[i+3]
	return *(*uint32)(unsafe.Pointer(&b[i]))
}

func u64at(b []byte, i int) uint64 {
	_ = b[i+7]
	return *(*uint64)(unsafe.Pointer(&b[i]))
}

func put32at(b []byte, i int, v uint32) {
	_ = b[i+3]
	*(*uint32)(unsafe.Pointer(&b[i])) = v
}
