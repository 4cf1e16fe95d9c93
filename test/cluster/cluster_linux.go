package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/switchyard-lb/switchyard/core/config"
	"github.com/switchyard-lb/switchyard/core/lb"
)

// DefaultDaemonConfig is the daemons' SwitchyardConfig: the shipped
// defaults (deploy/config.yaml: ipvs, clusterCIDRs [] and so on), without
// the WebAssembly cache directory, which the nodes would share, and with
// nf_conntrack_max left alone, as kind configures kube-proxy: the nodes
// are network namespaces, where the kernel makes it read-only; gossip
// timed for a loaded machine (TolerantGossip); then the LoadBalancer
// pools and their announcers (LoadBalancerConfig).
const DefaultDaemonConfig = daemonConfigBase + TolerantGossip + LoadBalancerConfig

// ShippedGossipDaemonConfig is DefaultDaemonConfig with the shipped
// gossip timing, the one users get (`make bench-cluster` measures it).
const ShippedGossipDaemonConfig = daemonConfigBase + LoadBalancerConfig

const daemonConfigBase = `apiVersion: switchyard.dev/v1alpha2
kind: SwitchyardConfig
dataplane:
  mode: ipvs
conntrack:
  maxPerCore: 0
policies:
  cacheDir: ""
`

// TolerantGossip is the failure detector's timing in the lab, the one
// deploy/config.yaml advises for loaded nodes (expected detection about
// 5.5 s, 13.5 s with the quorum guard's fence): every node and the
// router share one emulated CPU on a loaded host, where the shipped
// 100ms/50ms/3 declared live daemons dead and layer-2 failover once took
// 44 s, once over 2 minutes (1 run in 12 at load 20).
const TolerantGossip = `membership:
  probeInterval: 1s
  probeTimeout: 500ms
  suspicionMult: 4
`

// daemonHealth is the daemons' health address (/readyz), on each node's
// loopback among others (the default binds every address).
const daemonHealth = "127.0.0.1:10256"

// Options are what New needs besides the Plan.
type Options struct {
	Plan Plan
	// Switchyard is the static daemon binary.
	Switchyard string
	// AdminKubeconfig is the harness's kubeconfig, usable from the test
	// process's namespace.
	AdminKubeconfig string
	// DaemonKubeconfig is the daemons'. Its server must be a loopback
	// address and port (https://127.0.0.1:PORT): each node forwards it to
	// AdminKubeconfig's server.
	DaemonKubeconfig string
	// DaemonConfig is the daemons' SwitchyardConfig; default
	// DefaultDaemonConfig.
	DaemonConfig string
	// LogDir receives the daemons' logs; default a temporary directory.
	LogDir string
	// FRR runs FRR (zebra and bgpd) in the router's namespace, peering
	// with every node (Cluster.FRR); it needs FRRFiles.
	FRR bool
}

// Cluster is the topology, its API objects and the daemons.
type Cluster struct {
	*Topology
	Kube kubernetes.Interface
	// FRR is the router's BGP daemon when Options.FRR is set.
	FRR *FRR

	opts Options
	// apiListen and apiTarget are the API server forward's ends
	// (Options.DaemonKubeconfig's server, AdminKubeconfig's); forwards
	// holds each node's, by node index, nil while APIDown.
	apiListen, apiTarget string
	forwards             []io.Closer
}

// FailoverBound is the longest, by the gossip timing of the daemons'
// config and with its quorum guard, from a node's death to the other
// daemons moving its layer-2 addresses (membership's
// Timing.FailoverBound over every node).
func (c *Cluster) FailoverBound() (time.Duration, error) {
	cfg, err := config.Parse([]byte(c.opts.DaemonConfig))
	if err != nil {
		return 0, fmt.Errorf("cluster: the daemons' config: %w", err)
	}
	guard := cfg.Membership.QuorumGuard == nil || *cfg.Membership.QuorumGuard
	return lb.GossipTiming(cfg.Membership).FailoverBound(len(c.Nodes), guard), nil
}

// New builds the topology, starts the router's FRR (Options.FRR),
// forwards the API server into every node, writes the Node objects and
// starts no daemon (StartDaemons does).
func New(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if opts.DaemonConfig == "" {
		opts.DaemonConfig = DefaultDaemonConfig
	}
	if opts.LogDir == "" {
		if opts.LogDir, err = os.MkdirTemp("", "cluster-logs-"); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	admin, err := clientcmd.BuildConfigFromFlags("", opts.AdminKubeconfig)
	if err != nil {
		return nil, fmt.Errorf("cluster: admin kubeconfig: %w", err)
	}
	daemonCfg, err := clientcmd.BuildConfigFromFlags("", opts.DaemonKubeconfig)
	if err != nil {
		return nil, fmt.Errorf("cluster: daemon kubeconfig: %w", err)
	}
	listen, err := hostPort(daemonCfg.Host)
	if err != nil {
		return nil, err
	}
	target, err := hostPort(admin.Host)
	if err != nil {
		return nil, err
	}
	// The harness writes objects as fast as a control plane would:
	// client-go's default limit (5 requests a second, bursts of 10)
	// held the soak's endpoint updates to about 2.5 a second.
	admin.QPS, admin.Burst = 100, 200
	kube, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return nil, fmt.Errorf("cluster: admin client: %w", err)
	}
	topo, err := build(opts.Plan)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Topology: topo, Kube: kube, opts: opts, apiListen: listen, apiTarget: target}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	if opts.FRR {
		if c.FRR, err = startFRR(ctx, c.Router, c.Nodes); err != nil {
			return nil, err
		}
	}
	for _, n := range c.Nodes {
		f, err := n.NS.forward(listen, target)
		if err != nil {
			return nil, err
		}
		c.forwards = append(c.forwards, f)
		if err := createNode(ctx, kube, n); err != nil {
			return nil, err
		}
		n.daemon = &daemon{node: n, opts: &c.opts}
	}
	return c, nil
}

func hostPort(server string) (string, error) {
	u, err := url.Parse(server)
	if err != nil || u.Port() == "" {
		return "", fmt.Errorf("cluster: API server %q: want https://HOST:PORT", server)
	}
	return u.Host, nil
}

// Close stops the daemons, FRR, the forwards and the topology.
func (c *Cluster) Close() {
	for _, n := range c.Nodes {
		if n.daemon != nil {
			n.daemon.kill()
		}
	}
	if c.FRR != nil {
		c.FRR.Close()
	}
	for _, f := range c.forwards {
		if f != nil {
			f.Close()
		}
	}
	c.Topology.Close()
}

// StartDaemons starts the daemon on every node and waits until each is
// ready.
func (c *Cluster) StartDaemons(ctx context.Context) error {
	for _, n := range c.Nodes {
		if err := n.StartDaemon(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Node returns the node named name, or nil.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// daemon is one node's switchyard process.
type daemon struct {
	node *Node
	opts *Options

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	runs int
	// config, when set, replaces opts.DaemonConfig on this node.
	config string
}

// DaemonConfig is the daemons' config in this cluster (Options), the one
// SetDaemonConfig("") goes back to.
func (c *Cluster) DaemonConfig() string { return c.opts.DaemonConfig }

// SetDaemonConfig makes the node's next StartDaemon run with cfg instead
// of the cluster's DaemonConfig; "" goes back to the cluster's. It does
// not touch a running daemon.
func (n *Node) SetDaemonConfig(cfg string) {
	n.daemon.mu.Lock()
	defer n.daemon.mu.Unlock()
	n.daemon.config = cfg
}

// StartDaemon sets the node's sysctls as the DaemonSet's init container
// does (switchyard --set-sysctls), starts the daemon in the node's
// namespace and waits until its /readyz answers 200.
func (n *Node) StartDaemon(ctx context.Context) error {
	d := n.daemon
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd != nil {
		return fmt.Errorf("cluster: %s: daemon already running", n.Name)
	}
	dir := filepath.Join(d.opts.LogDir, n.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	cfg := filepath.Join(dir, "config.yaml")
	config := d.opts.DaemonConfig
	if d.config != "" {
		config = d.config
	}
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	d.runs++
	log, err := os.Create(filepath.Join(dir, fmt.Sprintf("switchyard-%d.log", d.runs)))
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	init := exec.CommandContext(ctx, d.opts.Switchyard, "--set-sysctls", "--config", cfg, "--log-format", "text")
	init.Stdout, init.Stderr = log, log
	if err := n.NS.Command(init); err != nil {
		log.Close()
		return err
	}
	if err := init.Wait(); err != nil {
		log.Close()
		return fmt.Errorf("cluster: %s: switchyard --set-sysctls: %w (log %s)", n.Name, err, log.Name())
	}
	cmd := exec.Command(d.opts.Switchyard, "--config", cfg, "--kubeconfig", d.opts.DaemonKubeconfig,
		"--hostname-override", n.Name, "--log-format", "text", "--profiling")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := n.NS.Command(cmd); err != nil {
		log.Close()
		return err
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		log.Close()
		close(done)
	}()
	d.cmd, d.done = cmd, done
	if err := n.waitReady(ctx, done); err != nil {
		return err
	}
	fmt.Fprintf(log, "cluster lab: %s: daemon ready at %s\n", n.Name, time.Now().Format(time.StampMilli))
	return nil
}

// waitReady polls the daemon's /readyz until it answers 200 or the daemon
// exits.
func (n *Node) waitReady(ctx context.Context, exited <-chan struct{}) error {
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: n.NS.DialContext, DisableKeepAlives: true}}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var last error
	for {
		resp, err := hc.Get("http://" + daemonHealth + "/readyz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("/readyz: %s: %s", resp.Status, strings.TrimSpace(string(body)))
		}
		last = err
		select {
		case <-exited:
			return fmt.Errorf("cluster: %s: daemon exited before it was ready (%v); log:\n%s", n.Name, last, n.DaemonLog(4096))
		case <-ctx.Done():
			return fmt.Errorf("cluster: %s: daemon not ready: %w (last: %v); log:\n%s", n.Name, ctx.Err(), last, n.DaemonLog(4096))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// StopDaemon stops the daemon with SIGTERM, as a rollout or a drain does,
// and waits until it exited.
func (n *Node) StopDaemon() error { return n.daemon.stop(syscall.SIGTERM) }

// KillDaemon SIGKILLs the daemon (a crash) and waits until it is gone.
func (n *Node) KillDaemon() error { return n.daemon.stop(syscall.SIGKILL) }

func (d *daemon) stop(sig syscall.Signal) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd == nil {
		return fmt.Errorf("cluster: %s: no daemon running", d.node.Name)
	}
	if err := syscall.Kill(d.cmd.Process.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("cluster: %s: signal daemon: %w", d.node.Name, err)
	}
	select {
	case <-d.done:
	case <-time.After(time.Minute):
		killGroup(d.cmd.Process.Pid)
		<-d.done
		d.cmd = nil
		return fmt.Errorf("cluster: %s: daemon ignored %s for a minute; killed", d.node.Name, sig)
	}
	d.cmd = nil
	return nil
}

func (d *daemon) kill() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd != nil {
		killGroup(d.cmd.Process.Pid)
		<-d.done
		d.cmd = nil
	}
}

// daemonMetrics is the daemons' metrics address (/metrics and
// /debug/state), on each node's loopback (the default).
const daemonMetrics = "127.0.0.1:10249"

// DebugState returns the node's daemon's /debug/state (JSON: desired and
// applied state, announcements among them).
func (n *Node) DebugState(ctx context.Context) (string, error) {
	return n.daemonGet(ctx, "/debug/state")
}

// DaemonGoroutines returns the node's daemon's goroutine stacks,
// aggregated (pprof's goroutine?debug=1; the lab runs the daemons with
// --profiling): where a stuck sync or drain waits.
func (n *Node) DaemonGoroutines(ctx context.Context) (string, error) {
	return n.daemonGet(ctx, "/debug/pprof/goroutine?debug=1")
}

// daemonGet returns the body of a GET of path on the daemon's metrics
// port.
func (n *Node) daemonGet(ctx context.Context, path string) (string, error) {
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: n.NS.DialContext, DisableKeepAlives: true}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+daemonMetrics+path, nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("cluster: %s: %s: %w", n.Name, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("cluster: %s: %s: %w", n.Name, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("cluster: %s: %s: %s: %s", n.Name, path, resp.Status, body)
	}
	return string(body), nil
}

// DaemonLogLines returns the lines of every run's log of the node's
// daemon that match, oldest run first, each prefixed with its run
// ("run 2: ").
func (n *Node) DaemonLogLines(match func(string) bool) []string {
	d := n.daemon
	d.mu.Lock()
	runs := d.runs
	d.mu.Unlock()
	var out []string
	for run := 1; run <= runs; run++ {
		b, err := os.ReadFile(filepath.Join(d.opts.LogDir, n.Name, fmt.Sprintf("switchyard-%d.log", run)))
		if err != nil {
			out = append(out, err.Error())
			continue
		}
		for line := range strings.Lines(string(b)) {
			if match(line) {
				out = append(out, fmt.Sprintf("run %d: %s", run, strings.TrimSuffix(line, "\n")))
			}
		}
	}
	return out
}

// DaemonLog returns the last max bytes of the node's latest daemon log.
func (n *Node) DaemonLog(max int) string {
	d := n.daemon
	b, err := os.ReadFile(filepath.Join(d.opts.LogDir, n.Name, fmt.Sprintf("switchyard-%d.log", d.runs)))
	if err != nil {
		return err.Error()
	}
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}
