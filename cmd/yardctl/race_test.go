//go:build race

package main

// raceEnabled: under the race detector wazero compiles, and flate
// compresses, many times slower.
const raceEnabled = true
