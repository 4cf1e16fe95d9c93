//go:build wasip1

// Command slowstart is an example policy: new endpoints ramp up. A usable
// endpoint (ready, or when none is ready, serving and terminating) whose
// age is known and below the window gets weight * age / window (at least
// 1); the others get the full weight. The scheduler is wrr, and while an
// endpoint is ramping the policy asks to be evaluated again every second.
// The exact rules are in wasm-sdk/examples.md.
//
// Parameters (JSON, optional): {"windowSec": 60, "weight": 100}.
package main
