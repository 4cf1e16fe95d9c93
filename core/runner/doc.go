// Package runner owns the bounded-frequency runner that drives the
// reconcile loop: it runs one function at most once per minimum interval
// however often it is triggered, at least once per maximum interval even
// without triggers (a periodic resync), and again after a retry interval
// when the function fails. WithBurst lets a few runs start back to back
// after a quiet time, the minimum interval then bounding their average
// rate (a token bucket, as kube-proxy's burstSyncs).
//
// It follows kube-proxy's BoundedFrequencyRunner (pkg/proxy/runner), made
// context-aware and with an injectable clock so that tests drive time
// themselves (see runnertest.Clock).
package runner
