// Package wasm owns the WebAssembly policy host: it loads untrusted
// policy modules that follow ABI v1 (wasm-sdk/ABI.md) into a wazero
// runtime and runs them as plugin.Policy.
//
// A Runtime compiles each module once per sha256 digest (with an optional
// on-disk compilation cache: one that cannot be written fails NewRuntime
// with ErrCacheDir, and a compilation it fails later is done again,
// without it if need be) and refuses modules that import anything
// outside the ABI. A Policy keeps a pool of instances, one per concurrent
// caller, and runs every call under a deadline and a memory cap, with no
// filesystem, network, environment or arguments and a real monotonic
// clock. An instance that traps, overruns or returns invalid output is
// discarded, so a later call starts from a fresh one. The errors of a
// call are core/plugin's (ErrDeadline is plugin.ErrPolicyDeadline, and
// so on), so the control loop names their failure reason without this
// package. Guest logs go to an injected callback, rate limited per
// policy; the package itself never logs.
package wasm
