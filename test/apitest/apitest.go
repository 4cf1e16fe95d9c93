package apitest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/switchyard-lb/switchyard/test/apitest/internal/controlplane"
)

// EnvBinDir names the environment variable holding the directory with etcd,
// kube-apiserver and kubectl.
const EnvBinDir = "SWITCHYARD_KUBE_BIN"

// Timeouts for starting the server and for single API calls and kubectl
// runs made by the helpers.
const (
	startTimeout = 2 * time.Minute
	callTimeout  = time.Minute
)

// Server is a running etcd and kube-apiserver.
type Server struct {
	Dir        string               // the server's state: PKI, etcd data, logs
	URL        string               // https://127.0.0.1:PORT
	Kubeconfig string               // admin kubeconfig path
	Admin      *rest.Config         // system:masters; use rest.CopyConfig before changing it
	Client     kubernetes.Interface // built from Admin

	bin string
	cp  *controlplane.ControlPlane
}

// Start starts etcd and kube-apiserver from $SWITCHYARD_KUBE_BIN and waits
// until the API server is ready. Cleanup stops both; when the test failed,
// the tails of their logs are logged first.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := os.Getenv(EnvBinDir)
	if bin == "" {
		t.Fatalf("%s is unset: set it to the directory printed by test/tools/kube-binaries.sh (make test-integration does)", EnvBinDir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	began := time.Now()
	cp, err := controlplane.Start(ctx, controlplane.Options{BinDir: bin, Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("start API server: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("API server logs:\n%s", cp.Logs(40))
		}
		if err := cp.Stop(); err != nil {
			t.Logf("stop API server: %v", err)
		}
	})
	t.Logf("API server %s ready in %s", cp.URL, time.Since(began).Round(time.Millisecond))
	client, err := kubernetes.NewForConfig(cp.Admin)
	if err != nil {
		t.Fatalf("admin client: %v", err)
	}
	return &Server{Dir: cp.Dir, URL: cp.URL, Kubeconfig: cp.Kubeconfig, Admin: cp.Admin, Client: client, bin: bin, cp: cp}
}

// Namespace creates a fresh namespace and returns its name. It is not
// deleted: without a controller manager it would stay Terminating.
func (s *Server) Namespace(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	ns, err := s.Client.CoreV1().Namespaces().Create(ctx,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "test-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	return ns.Name
}

// UserConfig returns a client configuration for user in groups,
// authenticated by a client certificate signed by the server's CA.
func (s *Server) UserConfig(t testing.TB, user string, groups ...string) *rest.Config {
	t.Helper()
	cfg, err := s.cp.UserConfig(user, groups...)
	if err != nil {
		t.Fatalf("client certificate for %q: %v", user, err)
	}
	return cfg
}

// ServiceAccountConfig returns a client configuration carrying a real token
// for ServiceAccount namespace/name, obtained through the TokenRequest API.
// The namespace and the ServiceAccount are created when missing. The token
// is valid for a day, and only while the ServiceAccount exists.
func (s *Server) ServiceAccountConfig(t testing.TB, namespace, name string) *rest.Config {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	_, err := s.Client.CoreV1().Namespaces().Create(ctx,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", namespace, err)
	}
	_, err = s.Client.CoreV1().ServiceAccounts(namespace).Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create ServiceAccount %s/%s: %v", namespace, name, err)
	}
	expiry := int64((24 * time.Hour).Seconds())
	tr, err := s.Client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("request token for ServiceAccount %s/%s: %v", namespace, name, err)
	}
	cfg := rest.AnonymousClientConfig(s.Admin)
	cfg.BearerToken = tr.Status.Token
	return cfg
}

// StopAPIServer stops kube-apiserver; etcd keeps running.
func (s *Server) StopAPIServer(t testing.TB) {
	t.Helper()
	if err := s.cp.StopAPIServer(); err != nil {
		t.Fatalf("stop kube-apiserver: %v", err)
	}
}

// StartAPIServer starts kube-apiserver again on the same port with the same
// PKI and etcd, and waits until it is ready.
func (s *Server) StartAPIServer(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := s.cp.StartAPIServer(ctx); err != nil {
		t.Fatalf("restart kube-apiserver: %v", err)
	}
}

// Kubectl runs kubectl with the admin kubeconfig and returns its standard
// output; on failure the error holds the standard error. A later
// "--kubeconfig", path in args overrides the admin one (see
// WriteKubeconfig). Warnings written to standard error are logged.
func (s *Server) Kubectl(t testing.TB, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	full := append([]string{"--kubeconfig", s.Kubeconfig, "--cache-dir", filepath.Join(s.Dir, "kubectl-cache")}, args...)
	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, controlplane.KubectlBinary), full...)
	cmd.Env = controlplane.EnvironWithout(os.Environ(), "KUBECONFIG=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	if stderr.Len() > 0 {
		t.Logf("kubectl %s: %s", strings.Join(args, " "), strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// WriteKubeconfig writes cfg as a self-contained kubeconfig file in the
// server's directory and returns its path, e.g. for kubectl --kubeconfig or
// a daemon's --kubeconfig.
func (s *Server) WriteKubeconfig(t testing.TB, cfg *rest.Config) string {
	t.Helper()
	f, err := os.CreateTemp(s.Dir, "kubeconfig-*.yaml")
	if err != nil {
		t.Fatalf("create kubeconfig file: %v", err)
	}
	f.Close()
	if err := controlplane.WriteKubeconfig(f.Name(), cfg); err != nil {
		t.Fatalf("write kubeconfig: %v", err)
	}
	return f.Name()
}
