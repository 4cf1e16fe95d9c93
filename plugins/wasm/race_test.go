//go:build race

package wasm_test

// raceEnabled: under the race detector wazero compiles ~30x slower.
const raceEnabled = true
