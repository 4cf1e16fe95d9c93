// Package wasmtest builds WebAssembly test modules from Go source with the
// real toolchain (GOOS=wasip1 GOARCH=wasm, -buildmode=c-shared), caching
// each build by a hash of its sources so repeated test runs are fast;
// Cached gives any other toolchain's build the same cache. CustomSections
// says what a built module kept (its "name" section: function names).
package wasmtest
