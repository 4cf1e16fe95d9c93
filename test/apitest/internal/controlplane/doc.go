// Package controlplane owns running a real etcd and kube-apiserver on
// loopback for tests and demos: it generates the PKI, picks free ports,
// starts and restarts the processes, waits for /readyz, and writes an admin
// kubeconfig. The binaries come from test/tools/kube-binaries.sh.
//
// It knows nothing about package testing: test/apitest wraps it for tests,
// and test/apitest/cmd/apiserver runs it outside tests (make demo).
package controlplane
