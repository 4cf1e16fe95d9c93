// Package policy is the Go guest SDK for Switchyard balancing policies
// (ABI v1, wasm-sdk/ABI.md). A policy is a function from an Input (the
// Service port, this node and its endpoints, read in place without
// copying) to an Output (one weight per endpoint, optionally an IPVS
// scheduler and a re-evaluation interval):
//
//	func evaluate(in *policy.Input, out *policy.Output) error { ... }
//
//	func init() { policy.Register(evaluate) }
//	func main() {}
//
// Build it with GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared.
// Register and Log only do something in a wasip1 build; everything else
// also builds natively, so policies can be unit-tested with Run.
//
// The SDK is a module of its own, github.com/switchyard-lb/switchyard/wasm-sdk/go,
// with no dependencies: a policy's module requires it alone (go get, or a
// go.work on a checkout), nothing of the daemon's. Its tests against the
// host's codec are in the daemon's module (wasm-sdk/conformance).
//
// Evaluate without garbage: Input hands out views ([]byte) of the input
// buffer, valid until the evaluation returns, and Output reuses its
// buffer across calls.
package policy
