// Package apitest runs a real etcd and kube-apiserver on loopback for
// integration tests (build tag integration, tests named TestIntegration*).
//
// The binaries come from $SWITCHYARD_KUBE_BIN, the directory printed by
// test/tools/kube-binaries.sh; Start fails the test when it is unset. Each
// Start gets its own PKI, ports and data in t.TempDir, and Cleanup stops the
// processes. The server runs Node,RBAC authorization, so UserConfig and
// ServiceAccountConfig give identities that are subject to real RBAC.
//
// A bare API server has no controller manager: tests write EndpointSlices
// themselves, namespaces never finish deleting (use Namespace for a fresh
// one), and ServiceAccounts have no token Secrets (ServiceAccountConfig uses
// the TokenRequest API).
package apitest
