//go:build wasip1

// Command canary is an example policy: a weighted canary split. The
// "canary" parameter selects canary endpoints by zone ("zone=b"), node
// ("node=n2") or IPv4 prefix ("cidr=10.0.1.0/24"); "percent" of the
// weight goes to the usable canaries and the rest to the other usable
// endpoints (usable: ready, or when none is ready, serving and
// terminating). With no canary or no other endpoint there is nothing to
// split and every usable endpoint gets 100. The exact rules are in
// wasm-sdk/examples.md.
//
// Parameters (JSON): {"canary": "zone=b", "percent": 10}.
package main
