// Package k8stest owns the one set of Kubernetes object builders the
// tests share: a ClusterIP Service with port "http" 80 to 8080 and an
// EndpointSlice of that port, as the API server would hold them, for
// fake clientsets and the real API server alike.
//
// It builds values only: each call returns a fresh object the test may
// change before it creates it.
package k8stest
