package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/switchyard-lb/switchyard/test/apitest/pki"
)

// The control plane's binaries, in Options.KubeBin.
const (
	etcdBin       = "etcd"
	apiServerBin  = "kube-apiserver"
	ctrlMgrBin    = "kube-controller-manager"
	schedulerBin  = "kube-scheduler"
	kubeletBin    = "kubelet"
	kubectlBin    = "kubectl"
	etcdClientURL = "http://127.0.0.1:2379"
)

// pkiFiles are the control plane's certificates and keys under dir/pki.
type pkiFiles struct{ dir string }

func (p pkiFiles) path(name string) string { return filepath.Join(p.dir, "pki", name) }
func (p pkiFiles) caCert() string          { return p.path("ca.crt") }
func (p pkiFiles) servingCert() string     { return p.path("apiserver.crt") }
func (p pkiFiles) servingKey() string      { return p.path("apiserver.key") }
func (p pkiFiles) saPublic() string        { return p.path("sa.pub") }
func (p pkiFiles) saPrivate() string       { return p.path("sa.key") }

// adminKubeconfig is system:masters, naming the API server at HostIP (in
// the node's namespace). The controller manager and the scheduler use it
// too: a lab needs no finer identities.
func adminKubeconfig(dir string) string { return filepath.Join(dir, "kubeconfig") }

// writePKI makes a CA, the API server's serving certificate (HostIP, the
// Service's first address, the in-cluster names), the service-account key
// pair, the admin kubeconfig, and in each guest's share its kubelet's
// (system:node:NAME in system:nodes, which the Node authorizer needs) and
// kube-proxy's (system:kube-proxy, which the default RBAC binds to
// system:node-proxier).
func writePKI(dir string, guests []*Guest) error {
	ca, err := pki.NewCA("switchyard-node-ca")
	if err != nil {
		return err
	}
	serving, err := ca.IssueServer("kube-apiserver", []string{
		HostIP, "127.0.0.1", KubernetesServiceIP, "localhost",
		"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
	})
	if err != nil {
		return err
	}
	admin, err := ca.IssueClient("switchyard-node-admin", []string{"system:masters"})
	if err != nil {
		return err
	}
	kubeProxy, err := ca.IssueClient("system:kube-proxy", nil)
	if err != nil {
		return err
	}
	saPub, saPriv, err := pki.NewSigningKey()
	if err != nil {
		return err
	}
	p := pkiFiles{dir: dir}
	if err := os.MkdirAll(filepath.Join(dir, "pki"), 0o700); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	server := "https://" + HostIP + ":" + strconv.Itoa(APIPort)
	files := map[string][]byte{
		p.caCert():           ca.CertPEM,
		p.servingCert():      serving.CertPEM,
		p.servingKey():       serving.KeyPEM,
		p.saPublic():         saPub,
		p.saPrivate():        saPriv,
		adminKubeconfig(dir): kubeconfig(server, ca.CertPEM, admin),
	}
	for _, g := range guests {
		kubelet, err := ca.IssueClient("system:node:"+g.Name, []string{"system:nodes"})
		if err != nil {
			return err
		}
		files[filepath.Join(g.share(), "kubelet.kubeconfig")] = kubeconfig(server, ca.CertPEM, kubelet)
		files[filepath.Join(g.share(), KubeProxyKubeconfig)] = kubeconfig(server, ca.CertPEM, kubeProxy)
	}
	for path, data := range files {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return fmt.Errorf("node: write %s: %w", path, err)
		}
	}
	return nil
}

// KubeProxyKubeconfig is kube-proxy's kubeconfig on the share (the guest
// sees the share at /mnt/host).
const KubeProxyKubeconfig = "kube-proxy.kubeconfig"

// kubeconfig renders a kubeconfig with the certificates inline.
func kubeconfig(server string, ca []byte, client pki.Pair) []byte {
	return fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: node
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: user
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: node
  context: {cluster: node, user: user}
current-context: node
`, server, b64(ca), b64(client.CertPEM), b64(client.KeyPEM))
}

// controlPlane is the argv of each control-plane process, in start order:
// etcd, kube-apiserver, then the two that need it ready.
func controlPlane(dir, bin string) [][]string {
	p := pkiFiles{dir: dir}
	kc := adminKubeconfig(dir)
	return [][]string{
		{filepath.Join(bin, etcdBin),
			"--name=node", "--data-dir=" + filepath.Join(dir, "etcd"),
			"--listen-client-urls=" + etcdClientURL, "--advertise-client-urls=" + etcdClientURL,
			"--listen-peer-urls=http://127.0.0.1:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
			"--initial-cluster=node=http://127.0.0.1:2380",
			"--unsafe-no-fsync=true", "--log-level=warn"},
		{filepath.Join(bin, apiServerBin),
			"--bind-address=0.0.0.0", "--advertise-address=" + HostIP,
			"--secure-port=" + strconv.Itoa(APIPort),
			"--etcd-servers=" + etcdClientURL,
			"--cert-dir=" + filepath.Join(dir, "pki"),
			"--tls-cert-file=" + p.servingCert(), "--tls-private-key-file=" + p.servingKey(),
			"--client-ca-file=" + p.caCert(),
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file=" + p.saPublic(),
			"--service-account-signing-key-file=" + p.saPrivate(),
			"--service-cluster-ip-range=" + ServiceCIDR,
			"--service-node-port-range=30000-32767",
			"--authorization-mode=Node,RBAC",
			"--allow-privileged=true",
			"--kubelet-preferred-address-types=InternalIP",
			"--profiling=false"},
		{filepath.Join(bin, ctrlMgrBin),
			"--kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
			"--bind-address=127.0.0.1", "--leader-elect=false",
			"--root-ca-file=" + p.caCert(),
			"--service-account-private-key-file=" + p.saPrivate(),
			"--use-service-account-credentials=false",
			"--service-cluster-ip-range=" + ServiceCIDR,
			"--controllers=*", "--profiling=false"},
		{filepath.Join(bin, schedulerBin),
			"--kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
			"--bind-address=127.0.0.1", "--leader-elect=false", "--profiling=false"},
	}
}

// waitAPIServer polls /readyz through the namespace until it answers.
func (n *Node) waitAPIServer(ctx context.Context) error {
	return poll(ctx, "kube-apiserver ready", func() error {
		body, err := n.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("%w: %s", err, body)
		}
		return nil
	}, n.checkProcs)
}
