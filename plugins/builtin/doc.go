// Package builtin owns Switchyard's built-in balancing policies, written
// in Go and addressed as builtin:<name>: uniform (also the fallback when a
// policy fails), local-first and topology-aware. They are pure functions
// of their input.
package builtin
