// Package abi owns the binary layout of Switchyard's WebAssembly policy
// ABI v1 (wasm-sdk/ABI.md): it encodes a plugin.PolicyInput into the input
// buffer a guest reads, and decodes and strictly validates the output a
// guest writes into a plugin.PolicyResult. It is pure Go with no I/O and
// no dependency on a WebAssembly runtime, so the host, yardctl and tests
// share it.
package abi
