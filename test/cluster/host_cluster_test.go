//go:build cluster && linux

package cluster_test

import (
	"bytes"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/switchyard-lb/switchyard/core/lbipam"
	"github.com/switchyard-lb/switchyard/test/apitest"
	"github.com/switchyard-lb/switchyard/test/cluster"
	"github.com/switchyard-lb/switchyard/test/lab"
)

// ClusterModules are the kernel modules the guest loads: the lab's
// defaults, the user-network NIC's, the bridges of the LAN and of every
// node's pods, and nftables' bridge meta (Partition).
var clusterModules = append(append(append([]string{}, lab.DefaultModules...), lab.UserNetModules...), "bridge", "nft_meta_bridge",
	// the dsr forwarding mode (TestDSR*): tunnels and the flow hash
	"ipip", "fou", "nft_hash", "ip6_tunnel")

// TestCluster is the host side of the cluster lab (`make test-cluster`):
// a real etcd and kube-apiserver here, deploy/'s RBAC and ServiceAccount
// applied, the daemon and this package's tests built static, and one
// guest that runs the guest suites against them. Settings:
// CLUSTER_RUN (the guest's -test.run, default all), CLUSTER_SKIP (its
// -test.skip, default none), CLUSTER_COUNT (the
// guest's -test.count, default 1), CLUSTER_MEM (guest MiB, default
// 1536), CLUSTER_TIMEOUT (the guest's -test.timeout, default 30m), and
// the guest suites' own (guestEnv), passed on.
func TestCluster(t *testing.T) {
	if os.Getenv(apitest.EnvBinDir) == "" {
		t.Fatalf("%s is unset: run test/tools/kube-binaries.sh (make test-cluster does)", apitest.EnvBinDir)
	}
	timeout := 30 * time.Minute
	if s := os.Getenv("CLUSTER_TIMEOUT"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("CLUSTER_TIMEOUT=%q: %v", s, err)
		}
		timeout = d
	}
	mem := 1536
	if s := os.Getenv("CLUSTER_MEM"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("CLUSTER_MEM=%q: want a positive integer", s)
		}
		mem = n
	}

	srv := apitest.Start(t)
	for _, f := range []string{"namespace.yaml", "serviceaccount.yaml", "rbac.yaml"} {
		if _, err := srv.Kubectl(t, "apply", "-f", filepath.Join("..", "..", "deploy", f)); err != nil {
			t.Fatalf("applying deploy/%s: %v", f, err)
		}
	}
	data := filepath.Join(t.TempDir(), "testdata")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	// The daemons' kubeconfig names https://127.0.0.1:PORT, which every
	// node namespace forwards; the harness's reaches the host's loopback
	// as 10.0.2.2, verified against the serving certificate's localhost.
	copyFile(t, srv.WriteKubeconfig(t, srv.ServiceAccountConfig(t, lbipam.DefaultLeaseNamespace, "switchyard")),
		filepath.Join(data, "daemon.kubeconfig"))
	u, err := url.Parse(srv.Admin.Host)
	if err != nil {
		t.Fatal(err)
	}
	admin := rest.CopyConfig(srv.Admin)
	admin.Host = "https://10.0.2.2:" + u.Port()
	admin.TLSClientConfig.ServerName = "localhost"
	copyFile(t, srv.WriteKubeconfig(t, admin), filepath.Join(data, "admin.kubeconfig"))

	// The guest gets the daemon at the same path (Job.Extra), which must
	// not be under /tmp: the guest mounts a tmpfs there. One directory per
	// run, so two checkouts can run the cluster lab at once.
	binRoot := filepath.Join(filepath.Dir(lab.DefaultCacheDir()), "cluster")
	if err := os.MkdirAll(binRoot, 0o755); err != nil {
		t.Fatal(err)
	}
	binDir, err := os.MkdirTemp(binRoot, "run-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(binDir) })
	switchyard := filepath.Join(binDir, "switchyard")
	began := time.Now()
	goBuild(t, "build", "-o", switchyard, "github.com/switchyard-lb/switchyard/cmd/switchyard")
	guestBin := filepath.Join(t.TempDir(), "cluster.test")
	goBuild(t, "test", "-c", "-o", guestBin, ".")
	t.Logf("daemon and guest tests built in %s", time.Since(began).Round(time.Millisecond))

	// The router runs Debian's FRR, TestLoadBalancerBGPNodeLoss's LAN
	// routers FRR and BIRD too (make test-cluster installs them), lent to
	// the guest with their libraries and the frr user.
	for _, f := range cluster.FRRFiles {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("the router needs FRR: %v (make test-cluster installs the frr package)", err)
		}
	}
	for _, f := range cluster.BIRDFiles {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("the LAN routers need BIRD: %v (make test-cluster installs the bird2 package)", err)
		}
	}
	assets, err := lab.EnsureAssets(t.Context(), lab.Config{Modules: clusterModules})
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"-test.v", "-test.timeout=" + timeout.String()}
	if run := os.Getenv("CLUSTER_RUN"); run != "" {
		args = append(args, "-test.run="+run)
	}
	if skip := os.Getenv("CLUSTER_SKIP"); skip != "" {
		args = append(args, "-test.skip="+skip)
	}
	if s := os.Getenv("CLUSTER_COUNT"); s != "" {
		if n, err := strconv.Atoi(s); err != nil || n <= 0 {
			t.Fatalf("CLUSTER_COUNT=%q: want a positive integer", s)
		}
		args = append(args, "-test.count="+s)
	}
	var out bytes.Buffer
	began = time.Now()
	res, err := lab.Run(t.Context(), assets, lab.Job{
		Binary:   guestBin,
		Args:     args,
		Env:      append([]string{envSwitchyard + "=" + switchyard}, passedEnv()...),
		MemoryMB: mem,
		Timeout:  timeout + 2*time.Minute,
		Output:   io.MultiWriter(&out, prefixWriter{w: os.Stdout}),
		TestData: data,
		UserNet:  true,
		Extra:    append(append([]string{switchyard}, cluster.FRRFiles...), cluster.BIRDFiles...),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("guest ran %s", time.Since(began).Round(time.Second))
	if res.ExitCode != 0 {
		t.Fatalf("guest suites failed (exit %d); output above", res.ExitCode)
	}
	if !strings.Contains(out.String(), "--- PASS") {
		t.Fatal("guest ran no test")
	}
	if strings.Contains(out.String(), "--- SKIP") {
		t.Fatal("a guest suite skipped; under make test-cluster every one must run")
	}
}

// guestEnv names the guest suites' settings (main_linux_test.go) that
// the host passes on.
var guestEnv = []string{envGossip, envL2Kills, envRollingFlows, envL2NoGrace, envAPIOutage, envChaosServices,
	envDSRFlows, envSoakServices, envSoakUpdates, envSoakDuration, envBFDKills}

// passedEnv are the guest suites' settings set here (see guestEnv).
func passedEnv() []string {
	var out []string
	for _, k := range guestEnv {
		if v, ok := os.LookupEnv(k); ok {
			out = append(out, k+"="+v)
		}
	}
	return out
}

func goBuild(t *testing.T, args ...string) {
	t.Helper()
	args = append([]string{args[0], "-ldflags=-s -w"}, args[1:]...)
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// prefixWriter prefixes each write with "guest: "; the guest writes
// whole lines.
type prefixWriter struct{ w io.Writer }

func (p prefixWriter) Write(b []byte) (int, error) {
	for line := range strings.SplitAfterSeq(string(b), "\n") {
		if line == "" {
			continue
		}
		if _, err := io.WriteString(p.w, "guest: "+line); err != nil {
			return 0, err
		}
	}
	return len(b), nil
}
