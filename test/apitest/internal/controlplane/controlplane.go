package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"

	"github.com/switchyard-lb/switchyard/test/apitest/pki"
	"github.com/switchyard-lb/switchyard/test/harness"
)

// Binary names expected in Options.BinDir.
const (
	EtcdBinary      = "etcd"
	APIServerBinary = "kube-apiserver"
	KubectlBinary   = "kubectl"
)

// startAttempts bounds retries when a freshly picked port was taken by
// someone else between picking and binding.
const startAttempts = 3

// readyPoll is how often /readyz is polled while starting.
const readyPoll = 50 * time.Millisecond

// Options configure a control plane.
type Options struct {
	BinDir string // holds etcd and kube-apiserver (test/tools/kube-binaries.sh)
	Dir    string // all state (pki/, etcd/, logs, kubeconfig); created if missing
}

// ControlPlane is a running etcd and kube-apiserver on loopback.
type ControlPlane struct {
	Dir        string
	URL        string       // https://127.0.0.1:PORT
	Kubeconfig string       // admin kubeconfig, written once the server is ready
	CAFile     string       // PEM of the CA that signs the serving and client certificates
	Admin      *rest.Config // system:masters client certificate; copy before changing

	bin    string
	layout layout
	ports  ports
	ca     *pki.CA

	mu   sync.Mutex
	etcd *process
	api  *process
}

// Start generates the PKI, starts etcd and kube-apiserver on free loopback
// ports, waits until /readyz answers ok and writes the admin kubeconfig. On
// error nothing is left running.
func Start(ctx context.Context, opts Options) (*ControlPlane, error) {
	for _, b := range []string{EtcdBinary, APIServerBinary} {
		if _, err := os.Stat(filepath.Join(opts.BinDir, b)); err != nil {
			return nil, fmt.Errorf("find %s in %q (build it with test/tools/kube-binaries.sh): %w", b, opts.BinDir, err)
		}
	}
	l := layout{dir: opts.Dir}
	if err := os.MkdirAll(l.path("pki"), 0o700); err != nil {
		return nil, fmt.Errorf("create control plane directory: %w", err)
	}
	c := &ControlPlane{Dir: opts.Dir, Kubeconfig: l.kubeconfig(), CAFile: l.caCert(), bin: opts.BinDir, layout: l}
	if err := c.writePKI(); err != nil {
		return nil, err
	}
	var err error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		if err = c.startOnFreePorts(ctx); err == nil || !errors.Is(err, errPortTaken) {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	if err := WriteKubeconfig(c.Kubeconfig, c.Admin); err != nil {
		return nil, errors.Join(err, c.Stop())
	}
	return c, nil
}

var errPortTaken = errors.New("port taken")

func (c *ControlPlane) startOnFreePorts(ctx context.Context) error {
	free, err := freePorts(3)
	if err != nil {
		return err
	}
	c.ports = ports{etcdClient: free[0], etcdPeer: free[1], apiServer: free[2]}
	c.URL = fmt.Sprintf("https://127.0.0.1:%d", c.ports.apiServer)
	c.Admin.Host = c.URL
	if err := os.RemoveAll(c.layout.etcdData()); err != nil {
		return fmt.Errorf("clear etcd data: %w", err)
	}
	etcd, err := startProcess(EtcdBinary, filepath.Join(c.bin, EtcdBinary), etcdArgs(c.layout, c.ports),
		EnvironWithout(os.Environ(), "ETCD_"), c.layout.path("etcd.log"))
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.etcd = etcd
	c.mu.Unlock()
	// kube-apiserver retries its storage connection, so it can start while
	// etcd is still coming up.
	if err := c.StartAPIServer(ctx); err != nil {
		etcdErr := etcd.stop()
		if portTaken(etcd) || portTaken(c.api) {
			return fmt.Errorf("%w: %w", errPortTaken, err)
		}
		return errors.Join(err, etcdErr, fmt.Errorf("etcd log:\n%s", etcd.tail(20)))
	}
	return nil
}

// StartAPIServer starts kube-apiserver again after StopAPIServer, on the
// same port with the same PKI and etcd, and waits until it is ready.
func (c *ControlPlane) StartAPIServer(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.api != nil && c.api.exited() == nil {
		return fmt.Errorf("start kube-apiserver: already running")
	}
	api, err := startProcess(APIServerBinary, filepath.Join(c.bin, APIServerBinary), apiServerArgs(c.layout, c.ports),
		os.Environ(), c.layout.path("kube-apiserver.log"))
	if err != nil {
		return err
	}
	c.api = api
	if err := waitReady(ctx, c.Admin, api, c.etcd); err != nil {
		return errors.Join(err, api.stop(), fmt.Errorf("kube-apiserver log:\n%s", api.tail(30)))
	}
	return nil
}

// StopAPIServer stops kube-apiserver and waits for it to exit; etcd keeps
// running. It asks for a graceful shutdown first; kube-apiserver may wait
// long for open watches to end, so after apiStopGrace it is killed, which
// is as good an outage for the tests (a crash rather than a drain).
func (c *ControlPlane) StopAPIServer() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.api == nil {
		return nil
	}
	_, err := c.api.stopWithin(apiStopGrace)
	return err
}

// apiStopGrace is how long StopAPIServer waits for a graceful exit.
const apiStopGrace = 3 * time.Second

// Stop kills kube-apiserver, then etcd, and returns once both are gone.
// Killing saves the second a graceful kube-apiserver shutdown takes: the
// data is thrown away (Start never reuses it). The directory is left in
// place.
func (c *ControlPlane) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, p := range []*process{c.api, c.etcd} {
		if p != nil {
			errs = append(errs, p.kill())
		}
	}
	return errors.Join(errs...)
}

// Logs returns the last n lines of both logs, for reports of failed tests.
func (c *ControlPlane) Logs(n int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	for _, p := range []*process{c.etcd, c.api} {
		if p != nil {
			fmt.Fprintf(&b, "--- %s (%s)\n%s\n", p.name, p.logPath, p.tail(n))
		}
	}
	return b.String()
}

// UserConfig returns a client configuration authenticating as user in
// groups with a client certificate signed by the cluster CA.
func (c *ControlPlane) UserConfig(user string, groups ...string) (*rest.Config, error) {
	pair, err := c.ca.IssueClient(user, groups)
	if err != nil {
		return nil, err
	}
	cfg := rest.AnonymousClientConfig(c.Admin)
	cfg.TLSClientConfig.CertData = pair.CertPEM
	cfg.TLSClientConfig.KeyData = pair.KeyPEM
	return cfg, nil
}

func (c *ControlPlane) writePKI() error {
	ca, err := pki.NewCA("switchyard-test-ca")
	if err != nil {
		return err
	}
	serving, err := ca.IssueServer("kube-apiserver", servingHosts())
	if err != nil {
		return err
	}
	admin, err := ca.IssueClient("switchyard-test-admin", []string{"system:masters"})
	if err != nil {
		return err
	}
	saPub, saPriv, err := pki.NewSigningKey()
	if err != nil {
		return err
	}
	l := c.layout
	for path, data := range map[string][]byte{
		l.caCert():      ca.CertPEM,
		l.servingCert(): serving.CertPEM,
		l.servingKey():  serving.KeyPEM,
		l.saPublic():    saPub,
		l.saPrivate():   saPriv,
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return fmt.Errorf("write PKI: %w", err)
		}
	}
	c.ca = ca
	c.Admin = &rest.Config{
		TLSClientConfig: rest.TLSClientConfig{CAData: ca.CertPEM, CertData: admin.CertPEM, KeyData: admin.KeyPEM},
		QPS:             1000,
		Burst:           2000,
	}
	return nil
}

// waitReady polls /readyz until it answers 200, a process exits, or ctx
// ends.
func waitReady(ctx context.Context, cfg *rest.Config, api, etcd *process) error {
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return fmt.Errorf("wait for kube-apiserver: %w", err)
	}
	client.Timeout = 5 * time.Second
	defer client.CloseIdleConnections()
	ticker := time.NewTicker(readyPoll)
	defer ticker.Stop()
	var last error
	for {
		if last = readyz(ctx, client, cfg.Host); last == nil {
			return nil
		}
		for _, p := range []*process{api, etcd} {
			if err := p.exited(); err != nil {
				return fmt.Errorf("wait for kube-apiserver ready: %w", err)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for kube-apiserver ready: %w (last: %w)", ctx.Err(), last)
		case <-api.done:
		case <-ticker.C:
		}
	}
}

func readyz(ctx context.Context, client *http.Client, host string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, host+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// freePorts picks n distinct loopback ports that were free a moment ago,
// below the kernel's ephemeral range (harness.PickPort, which never hands
// a port out twice): StopAPIServer leaves the API server's port
// unbound for the whole outage, and one from inside the range could be
// given to any process's connection meanwhile, failing the restart.
func freePorts(n int) ([]int, error) {
	out := make([]int, 0, n)
	for range n {
		p, err := harness.PickPort(netip.MustParseAddr("127.0.0.1"))
		if err != nil {
			return nil, fmt.Errorf("pick a free port: %w", err)
		}
		out = append(out, p)
	}
	return out, nil
}

func portTaken(p *process) bool {
	if p == nil {
		return false
	}
	data, err := os.ReadFile(p.logPath)
	return err == nil && strings.Contains(string(data), "address already in use")
}
