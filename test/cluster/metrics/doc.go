// Package metrics holds metrics.awk, the summary make bench-cluster
// prints of the cluster lab's measurements (each "cluster-metric" a suite
// logged: runs, median, max, and the "cluster-bound" its median must stay
// under), and the test of it. It is its own package so that its test runs
// on the host in make test-unit: the cluster lab's guest runs package
// test/cluster's tests and must skip none.
package metrics
