// Package conformance holds the native Go statement of the example
// policies every SDK ships (wasm-sdk/examples.md), and the suite that
// runs every example module of every SDK language (Go, Rust,
// AssemblyScript) through the real host (plugins/wasm) on the same
// scenarios, asserting that all languages decide identically and as the
// reference does.
//
// TestSDKInputAccessors also runs a probe module per SDK (Rust and
// AssemblyScript: wasm-sdk/<lang>/testdata/probe) that folds every input
// field into the weights, and compares it with the Go SDK reading the
// same bytes natively.
//
// The Go SDK's module (wasm-sdk/go) depends on nothing, so the tests of
// the Go SDK against the host's codec (plugins/wasm/abi) are here too:
// the SDK reads what the host encodes and writes what the host's strict
// decoder reads; these need no module and run in plain go test.
//
// The modules are built by `make wasm-conformance` into
// $SWITCHYARD_WASM_DIR/<lang>/<example>.wasm. With that variable set, a
// missing module fails the suite; without it (plain `go test ./...`) the
// suite skips.
package conformance
