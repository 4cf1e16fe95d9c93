package controlplane

import (
	"fmt"
	"path/filepath"
	"strings"
)

// ServiceCIDRs are the dual-stack Service ranges, IPv4 primary.
const ServiceCIDRs = "10.96.0.0/16,fd00:10:96::/108"

// ServiceAccountIssuer is the issuer of service-account tokens.
const ServiceAccountIssuer = "https://kubernetes.default.svc.cluster.local"

// layout names the files of one control plane under its directory.
type layout struct{ dir string }

func (l layout) path(name ...string) string {
	return filepath.Join(append([]string{l.dir}, name...)...)
}
func (l layout) caCert() string      { return l.path("pki", "ca.crt") }
func (l layout) servingCert() string { return l.path("pki", "apiserver.crt") }
func (l layout) servingKey() string  { return l.path("pki", "apiserver.key") }
func (l layout) saPublic() string    { return l.path("pki", "sa.pub") }
func (l layout) saPrivate() string   { return l.path("pki", "sa.key") }
func (l layout) etcdData() string    { return l.path("etcd") }
func (l layout) kubeconfig() string  { return l.path("kubeconfig") }

// ports are the loopback ports one control plane listens on.
type ports struct {
	etcdClient, etcdPeer, apiServer int
}

// etcdArgs are etcd's flags: loopback only, throwaway data (no fsync), quiet
// logs.
func etcdArgs(l layout, p ports) []string {
	client := fmt.Sprintf("http://127.0.0.1:%d", p.etcdClient)
	peer := fmt.Sprintf("http://127.0.0.1:%d", p.etcdPeer)
	return []string{
		"--name=default",
		"--data-dir=" + l.etcdData(),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=default=" + peer,
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	}
}

// apiServerArgs are kube-apiserver's flags: loopback only, client-certificate
// and service-account authentication, Node and RBAC authorization, dual-stack
// Service ranges, and no endpoint reconciler (it fails every 10 s with a
// loopback advertise address, shared/notes/apiserver.md).
func apiServerArgs(l layout, p ports) []string {
	return []string{
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", p.apiServer),
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", p.etcdClient),
		"--cert-dir=" + l.path("pki"),
		"--tls-cert-file=" + l.servingCert(),
		"--tls-private-key-file=" + l.servingKey(),
		"--client-ca-file=" + l.caCert(),
		"--service-account-issuer=" + ServiceAccountIssuer,
		"--service-account-key-file=" + l.saPublic(),
		"--service-account-signing-key-file=" + l.saPrivate(),
		"--service-cluster-ip-range=" + ServiceCIDRs,
		"--service-node-port-range=30000-32767",
		"--authorization-mode=Node,RBAC",
		"--endpoint-reconciler-type=none",
		"--allow-privileged=true",
		"--profiling=false",
	}
}

// servingHosts are the names and addresses the serving certificate covers.
func servingHosts() []string {
	return []string{
		"127.0.0.1", "::1", "localhost", "10.96.0.1", "fd00:10:96::1",
		"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
	}
}

// EnvironWithout returns env without the variables whose names start with
// prefix. etcd turns every ETCD_* variable into a flag, so an ETCD_ variable
// set for some other tool would change or break the test etcd.
func EnvironWithout(env []string, prefix string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, prefix) {
			out = append(out, kv)
		}
	}
	return out
}
