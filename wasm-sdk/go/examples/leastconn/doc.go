//go:build wasip1

// Command leastconn is an example policy: endpoints with fewer active
// connections get more weight. A usable endpoint (ready, or when none is
// ready, serving and terminating) gets max(1, min(scale, 65535) / (1 +
// active connections)); the scheduler is wrr and the policy asks to be
// evaluated again every 5 s so the weights follow the live statistics.
// The exact rules are in wasm-sdk/examples.md.
//
// Parameters (JSON, optional): {"scale": 10000}.
package main
