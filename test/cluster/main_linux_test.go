package cluster_test

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/switchyard-lb/switchyard/test/cluster"
	"github.com/switchyard-lb/switchyard/test/lab"
	"github.com/switchyard-lb/switchyard/test/lab/guest"
)

// What the host side (TestCluster) hands the guest: the daemon binary's
// path in this environment variable, the kubeconfigs in testdata/.
const (
	envSwitchyard    = "SWITCHYARD_CLUSTER_BIN"
	adminKubeconfig  = "testdata/admin.kubeconfig"
	daemonKubeconfig = "testdata/daemon.kubeconfig"
)

// The guest suites' settings, which the host side passes on:
// CLUSTER_GOSSIP=shipped runs the daemons with the shipped gossip timing
// (cluster.ShippedGossipDaemonConfig) instead of the lab's tolerant one;
// CLUSTER_L2_KILLS is how many layer-2 failovers on a daemon kill
// TestLoadBalancerLayer2 measures in a row (default 1);
// CLUSTER_ROLLING_FLOWS is the rolling restart suites' flow count
// (envRollingFlows); CLUSTER_L2_NO_GRACE=1 adds to
// TestLoadBalancerLayer2RollingRestart a rolling restart without the
// restart grace, for comparison.
const (
	envGossip    = "CLUSTER_GOSSIP"
	envL2Kills   = "CLUSTER_L2_KILLS"
	envL2NoGrace = "CLUSTER_L2_NO_GRACE"
)

// lc is the guest's cluster, built once by TestMain with every daemon
// running.
var lc *cluster.Cluster

func inGuest() bool { return os.Getenv(lab.GuestEnv) == "1" }

func TestMain(m *testing.M) {
	if !inGuest() {
		os.Exit(m.Run()) // every guest test skips itself
	}
	flag.Parse()
	code, err := runGuest(m)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cluster lab: %v\n", err)
		code = 1
	}
	os.Exit(code)
}

func runGuest(m *testing.M) (int, error) {
	if os.Getenv(envSwitchyard) == "" {
		// Booted by hand (labrun) without the host side: only the
		// harness's own tests run.
		return m.Run(), nil
	}
	if err := guest.ConfigureUserNet(); err != nil {
		return 0, err
	}
	admin, err := filepath.Abs(adminKubeconfig)
	if err != nil {
		return 0, err
	}
	daemon, err := filepath.Abs(daemonKubeconfig)
	if err != nil {
		return 0, err
	}
	daemonConfig := cluster.DefaultDaemonConfig
	switch g := os.Getenv(envGossip); g {
	case "", "tolerant":
	case "shipped":
		daemonConfig = cluster.ShippedGossipDaemonConfig
	default:
		return 0, fmt.Errorf("%s=%q: want tolerant or shipped", envGossip, g)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	began := time.Now()
	c, err := cluster.New(ctx, cluster.Options{
		Switchyard:       os.Getenv(envSwitchyard),
		AdminKubeconfig:  admin,
		DaemonKubeconfig: daemon,
		DaemonConfig:     daemonConfig,
		FRR:              true,
	})
	if err != nil {
		return 0, err
	}
	defer c.Close()
	fmt.Printf("cluster lab: topology of %d nodes built in %s\n", len(c.Nodes), time.Since(began).Round(time.Millisecond))
	began = time.Now()
	if err := c.StartDaemons(ctx); err != nil {
		return 0, err
	}
	fmt.Printf("cluster lab: %d daemons ready in %s\n", len(c.Nodes), time.Since(began).Round(time.Millisecond))
	lc = c
	return m.Run(), nil
}

// requireGuest skips t outside the kernel lab (make test-cluster runs
// the package there) and logs every daemon's log tail if t fails.
func requireGuest(t *testing.T) *cluster.Cluster {
	t.Helper()
	if !inGuest() {
		t.Skipf("guest-only: runs in the cluster lab (%s=1); run `make test-cluster`", lab.GuestEnv)
	}
	if lc == nil {
		t.Skipf("no cluster: %s is unset (TestCluster, the host side, sets it)", envSwitchyard)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range lc.Nodes {
				t.Logf("%s's daemon log (tail):\n%s", n.Name, n.DaemonLog(3000))
				if st, err := n.DebugState(context.Background()); err == nil {
					t.Logf("%s's /debug/state (head):\n%.6000s", n.Name, st)
				}
			}
			if lc.FRR != nil {
				out, _ := lc.FRR.Vtysh(context.Background(), "show bgp summary", "show ip route")
				t.Logf("the router's FRR:\n%s\n%s", out, lc.FRR.Log(3000))
			}
		}
	})
	return lc
}

// namespace returns a fresh Kubernetes namespace for t.
func namespace(t *testing.T, c *cluster.Cluster) string {
	t.Helper()
	ns, err := c.NewNamespace(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// waitAnswer polls GET target from from until check accepts an answer,
// for at most timeout (the daemons program a new Service within their
// sync period; waits bound failures only), and returns that answer.
func waitAnswer(ctx context.Context, from *cluster.Namespace, target netip.AddrPort, timeout time.Duration, check func(cluster.Answer) error) (cluster.Answer, error) {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		a, err := cluster.Get(ctx, from, target)
		if err == nil {
			if err = check(a); err == nil {
				return a, nil
			}
		}
		last = err
		if time.Now().After(deadline) {
			return cluster.Answer{}, fmt.Errorf("%s from %s: gave up after %s: %w", target, from.Name, timeout, last)
		}
		select {
		case <-ctx.Done():
			return cluster.Answer{}, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
