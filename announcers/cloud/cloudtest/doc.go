// Package cloudtest is a provider of the cloud webhook (../CONTRACT.md)
// for tests: an in-memory, goroutine-safe HTTP server that follows the
// contract, written from the document rather than from the announcer's
// code, with fault injection.
package cloudtest
