// Package scenario owns the scenario files policy authors test their
// policies with (`yardctl policy test`, `validate --scenario`, `bench
// --scenario`): one Service port, the node, the endpoints with their live
// statistics, and optionally what the policy is expected to decide.
//
// It parses a file into a plugin.PolicyInput, compares a decision (a
// plugin.PolicyResult or an evaluation error) with the file's expect
// section, and rewrites that section from a decision (golden mode). It
// runs no policy itself: callers evaluate through the wasm host or a
// built-in. Parse errors name the line and the field in the file's own
// words, with an excerpt of the file.
package scenario
