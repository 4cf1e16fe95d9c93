// Package registry owns the delivery of balancing policies: it resolves
// which policy a Service uses and keeps the WebAssembly policies of the
// cluster loaded.
//
// A Service names its policy in the switchyard.dev/policy annotation,
// either "builtin:<name>" (plugins/builtin) or the name of a policy
// ConfigMap; without the annotation it uses the cluster default of the
// config (policies.default), else builtin:uniform.
//
// Policy ConfigMaps live in switchyard-system and carry the label
// switchyard.dev/policy: "true". Their binaryData holds policy.wasm, or
// policy.wasm.gz (gzip, decompressed with a size cap); their data may hold
// params.json (the default parameters; a Service's
// switchyard.dev/policy-params replaces them whole) and sha256, a pin: the
// lowercase hex sha256 of the uncompressed module (what `yardctl policy
// pack` prints and what the wasm host caches by), so a pin survives
// re-compressing. A module whose digest differs from its pin is refused.
//
// A Registry implements plugin.Policies: a policy that does not exist
// fails Resolve with ErrNotFound, a plugin.ErrNoPolicy.
//
// A Registry watches those ConfigMaps with an informer filtered by the
// label in that namespace. Its handlers only record; a worker goroutine
// loads modules through the injected loader (the wasm host, which compiles
// once per digest), swaps them in, keeps a replaced module open a while for
// evaluations in flight, and reports the names of the policies that
// changed so the control loop re-evaluates the Services that use them.
// A new version that cannot be used (it does not decode, misses its pin,
// or fails to load) does not replace the last good one: Resolve keeps
// returning that version, with its parameters and an error naming both,
// so the Services keep being balanced by it and are told. With
// Options.LastGood the last good version is also kept on disk
// (plugins/lastgood), so a registry started while the ConfigMap is broken
// (a restarted daemon) runs it too; a damaged file is ignored, and a
// policy's ConfigMap gone (deleted, or absent from the first list) takes
// its kept version with it. Resolve's
// ConfigMap policies are plugin.Versioned: the module's digest and the
// resourceVersion it was loaded from, which /debug/state shows.
//
// Reporter (a plugin.PolicyReporter) tells users about their Service's
// policy: Kubernetes Events and the switchyard.dev/PolicyReady condition
// in the Service's status, written rate limited and only when it changes.
package registry
