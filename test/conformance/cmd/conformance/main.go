// Command conformance runs upstream's e2e.test on test/node's real node
// against each service proxy in turn and prints one table of the results
// (make conformance, make conformance-smoke):
//
//	conformance -kube-bin DIR -rootfs FILE -userland FILE -image TAR -switchyard-bin FILE
//	            [-proxies switchyard,kube-proxy-nftables,kube-proxy-ipvs] [-focus RE] [-skip RE]
//	            [-results DIR] [-require-pass] [-table-only | -rollout | -bootstrap | -switch | -detect-local]
//
// It reuses a running node (make node-up) or brings one up, and leaves
// it running (make node-down). Each proxy's last report stays under
// -results; -table-only prints the table from them without running
// (-results may then list several directories, chunks of one selection:
// the last chunk that ran a spec gives its cell).
// -require-pass (make test-conformance) fails the run when a selected
// spec failed or none passed.
// -rollout (make conformance-rollout), -bootstrap (make
// conformance-bootstrap), -switch (make conformance-switch) and
// -detect-local (make test-conformance) run no e2e.test: they measure a
// rollout restart of the Switchyard DaemonSet under traffic, its start
// on a node without a service proxy, the node switching from kube-proxy
// to Switchyard and back under traffic, and detect-local following the
// Node's pod CIDR (RunRollout, RunBootstrap, RunSwitch, RunDetectLocal).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/switchyard-lb/switchyard/test/conformance"
	"github.com/switchyard-lb/switchyard/test/node"
)

// The default selection: upstream's Services specs and the Conntrack,
// EndpointSlice and KubeProxy network specs, without the ones that
// disrupt the cluster, are known flaky or need a feature gate.
const (
	defaultFocus = `\[sig-network\] (Services|Conntrack|EndpointSlice|KubeProxy) `
	defaultSkip  = `\[Disruptive\]|\[Flaky\]|\[Feature:`
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("conformance", flag.ContinueOnError)
	dir := fs.String("dir", node.DefaultDir(), "the node's state directory")
	kubeBin := fs.String("kube-bin", "", "kube binaries (test/tools/kube-binaries.sh --kubelet --control-plane --agnhost --coredns --kube-proxy --e2e)")
	rootfs := fs.String("rootfs", "", "the node's root filesystem (test/node/rootfs.sh)")
	userland := fs.String("userland", "", "agnhost's userland (test/node/userland.sh)")
	image := fs.String("image", "", "make image's docker archive (bin/image/switchyard.tar)")
	swBin := fs.String("switchyard-bin", "", "the static switchyard binary the cleanups run (bin/image/bin/switchyard)")
	deploy := fs.String("deploy", "test/tools/image/deploy", "kustomization deploying Switchyard with the imported image")
	proxies := fs.String("proxies", conformance.Switchyard, "comma-separated proxies to run, in order: "+conformance.Switchyard+", "+conformance.KubeProxyNFTables+", "+conformance.KubeProxyIPVS)
	focus := fs.String("focus", defaultFocus, "e2e.test --ginkgo.focus")
	skip := fs.String("skip", defaultSkip, "e2e.test --ginkgo.skip")
	results := fs.String("results", "", "where each proxy's last report is kept")
	timeout := fs.Duration("timeout", 6*time.Hour, "bound on each e2e.test run")
	tableOnly := fs.Bool("table-only", false, "print the table from the stored reports, run nothing")
	bootstrap := fs.Bool("bootstrap", false, "instead of e2e.test: Switchyard started with no proxy on the node and without the lab's stand-in for the kubernetes Service, first without deploy's API server address (must stay unready), then with it (results in -results/bootstrap.json)")
	rollout := fs.Bool("rollout", false, "instead of e2e.test: kubectl rollout restart of the Switchyard DaemonSet under traffic, measured (results in -results/rollout.json)")
	switchProxies := fs.Bool("switch", false, "instead of e2e.test: the node switched from kube-proxy (IPVS mode) to Switchyard with --cleanup-kube-proxy and back with --cleanup under traffic, measured (results in -results/switch.json)")
	detectLocal := fs.Bool("detect-local", false, "instead of e2e.test: Switchyard's detect-local picking up the Node's pod CIDR (patched in when it has none) without a restart (results in -results/detect-local.json)")
	nodes := fs.Int("nodes", 1, fmt.Sprintf("how many nodes (guests) the cluster has, 1 to %d: the multi-node specs need 2 (a running node with another count is not reused)", node.MaxGuests))
	requirePass := fs.Bool("require-pass", false, "fail when a selected spec failed or none passed")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *results == "" {
		return errors.New("-results is required")
	}
	filter, err := conformance.NewFilter(*focus, *skip)
	if err != nil {
		return err
	}
	store := conformance.Store{Dir: *results}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	cfg := runConfig{
		dir: *dir, kubeBin: *kubeBin, rootfs: *rootfs, userland: *userland, image: *image,
		swBin: *swBin, deploy: *deploy, proxies: strings.Split(*proxies, ","), nodes: *nodes,
		e2e: conformance.E2E{
			Bin: filepath.Join(*kubeBin, "e2e.test"), Kubectl: filepath.Join(*kubeBin, "kubectl"),
			Focus: *focus, Skip: *skip, Timeout: *timeout,
		},
	}
	switch {
	case *rollout:
		return runSwitchyard(ctx, log, *results, cfg, "rollout")
	case *bootstrap:
		return runSwitchyard(ctx, log, *results, cfg, "bootstrap")
	case *switchProxies:
		return runSwitchyard(ctx, log, *results, cfg, "switch")
	case *detectLocal:
		return runSwitchyard(ctx, log, *results, cfg, "detect-local")
	}
	if !*tableOnly {
		if err := runProxies(ctx, log, store, cfg); err != nil {
			return err
		}
	}
	// -table-only may name several result directories (chunks of one
	// selection): their reports are merged, the last chunk to run a spec
	// giving its cell.
	dirs := []string{*results}
	if *tableOnly {
		dirs = strings.Split(*results, ",")
	}
	var sets []map[string][]conformance.Result
	for _, d := range dirs {
		runs, infos, err := conformance.Store{Dir: d}.Load()
		if err != nil {
			return err
		}
		sets = append(sets, runs)
		for _, c := range conformance.Columns {
			if i, ok := infos[c.Proxy]; ok {
				fmt.Printf("%s (%s): %s, e2e.test %s wall, load %s -> %s, exit %d, focus `%s` skip `%s`\n",
					c.Title, d, i.Start.UTC().Format(time.RFC3339), i.Wall, i.LoadBefore, i.LoadAfter, i.ExitCode, i.Focus, i.Skip)
			}
		}
	}
	runs := conformance.Merge(sets...)
	fmt.Printf("reports: %s\n\n%s", *results, conformance.Table(runs, filter))
	if *requirePass {
		return requirePassed(runs, filter, cfg.proxies)
	}
	return nil
}

// requirePassed fails when a selected spec did not pass for one of
// proxies (a skip too: the smoke subset is chosen to run on one node), or
// when a proxy ran none.
func requirePassed(runs map[string][]conformance.Result, filter conformance.Filter, proxies []string) error {
	var errs []error
	for _, p := range proxies {
		p = strings.TrimSpace(p)
		passed := 0
		for _, r := range runs[p] {
			if r.Setup || !filter.Match(r.Spec) {
				continue
			}
			if r.Outcome != conformance.Pass {
				errs = append(errs, fmt.Errorf("%s: %s: %s %s", p, r.Spec, r.Outcome, r.Reason))
				continue
			}
			passed++
		}
		if passed == 0 {
			errs = append(errs, fmt.Errorf("%s: no selected spec passed", p))
		}
	}
	return errors.Join(errs...)
}

// openNode reuses the running node when its Node is Ready, importing the
// current switchyard:dev and applying the DNS add-on, or brings one up.
func openNode(ctx context.Context, log *slog.Logger, c runConfig) (*node.Node, error) {
	swImage := node.Image{Ref: "switchyard:dev", Path: c.image}
	n, err := node.Open(c.dir)
	if err == nil {
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		err = n.Ready(rctx)
		cancel()
	}
	if err == nil && len(n.Guests) != c.nodes {
		n.Close()
		return nil, fmt.Errorf("conformance: the running node has %d guests, want %d: take it down first (make node-down)", len(n.Guests), c.nodes)
	}
	if err == nil {
		log.Info("reusing the running node", "dir", c.dir)
		if err := n.Import(ctx, swImage); err != nil {
			n.Close()
			return nil, err
		}
		if err := n.ApplyDNS(ctx); err != nil {
			n.Close()
			return nil, err
		}
	} else {
		if n != nil {
			n.Close()
		}
		log.Info("bringing the node up")
		n, err = node.Up(ctx, node.Options{
			Dir: c.dir, KubeBin: c.kubeBin, Rootfs: c.rootfs, Userland: c.userland,
			Guests: c.nodes, Images: []node.Image{swImage}, Log: log,
		})
		if err != nil {
			return nil, err
		}
		log.Info("node up", "timings", n.Timings.String())
	}
	return n, nil
}

type runConfig struct {
	dir, kubeBin, rootfs, userland, image, swBin, deploy string
	proxies                                              []string
	nodes                                                int
	e2e                                                  conformance.E2E
}

// check names the first input c lacks.
func (c runConfig) check() error {
	for _, need := range []struct{ what, path string }{
		{"-kube-bin", c.kubeBin}, {"-rootfs", c.rootfs}, {"-userland", c.userland},
		{"-image", c.image}, {"-switchyard-bin", c.swBin},
	} {
		if need.path == "" {
			return fmt.Errorf("%s is required", need.what)
		}
	}
	return nil
}

// runSwitchyard measures one thing about Switchyard on the node, writes
// the result to results/NAME.json and prints it: a rollout restart under
// traffic (kube-proxy stopped through its cleanup first; it fails when an
// established connection was lost or a request failed), the start
// without a service proxy (bootstrap, RunBootstrap), the switch from
// kube-proxy and back (switch, RunSwitch; kube-proxy runs at the end) or
// detect-local following the Node (detect-local, RunDetectLocal).
// Switchyard stays deployed but after switch.
func runSwitchyard(ctx context.Context, log *slog.Logger, results string, c runConfig, name string) error {
	if err := c.check(); err != nil {
		return err
	}
	all := conformance.Proxies{SwitchyardBin: c.swBin, Deploy: c.deploy, KubeProxyBin: filepath.Join(c.kubeBin, "kube-proxy"), Log: log}
	sw, err := all.Get(conformance.Switchyard)
	if err != nil {
		return err
	}
	n, err := openNode(ctx, log, c)
	if err != nil {
		return err
	}
	defer n.Close()
	var res any
	switch name {
	case "bootstrap":
		res, err = conformance.RunBootstrap(ctx, n, sw, all.Others(sw), c.deploy, 3*time.Minute, log)
	case "rollout":
		res, err = rollout(ctx, n, sw, all.Others(sw), log)
	case "switch":
		res, err = conformance.RunSwitch(ctx, n, all, conformance.SwitchSpec{
			RequestPeriod: 200 * time.Millisecond, Settle: 20 * time.Second,
			Timeout: 3 * time.Second, Recover: 15 * time.Minute,
		}, log)
	case "detect-local":
		res, err = conformance.RunDetectLocal(ctx, n, sw, all.Others(sw), 5*time.Minute, log)
	default:
		return fmt.Errorf("unknown measurement %q", name)
	}
	b, jerr := json.MarshalIndent(res, "", "  ")
	if jerr != nil {
		return errors.Join(err, jerr)
	}
	if merr := os.MkdirAll(results, 0o755); merr != nil {
		return errors.Join(err, merr)
	}
	if werr := os.WriteFile(filepath.Join(results, name+".json"), b, 0o644); werr != nil {
		return errors.Join(err, werr)
	}
	fmt.Printf("%s\n", b)
	return err
}

// rollout switches the node to Switchyard and measures a rollout
// restart under traffic; losing a connection or a request is an error.
func rollout(ctx context.Context, n *node.Node, sw conformance.Proxy, others []conformance.Proxy, log *slog.Logger) (conformance.RolloutResult, error) {
	for _, o := range others {
		if err := o.Stop(ctx, n); err != nil {
			return conformance.RolloutResult{}, fmt.Errorf("stop %s: %w", o.Name(), err)
		}
	}
	if err := sw.Start(ctx, n); err != nil {
		return conformance.RolloutResult{}, fmt.Errorf("start %s: %w", sw.Name(), err)
	}
	r, err := conformance.RunRollout(ctx, n, conformance.RolloutSpec{
		Conns: 20, ConnPeriod: time.Second, RequestPeriod: 200 * time.Millisecond,
		Settle: 30 * time.Second, Timeout: 30 * time.Second,
	}, log)
	if err == nil && (r.ConnsLost > 0 || r.RequestsFailed > 0) {
		err = fmt.Errorf("rollout restart: %d of %d established connections lost, %d of %d requests failed",
			r.ConnsLost, r.Conns, r.RequestsFailed, r.Requests)
	}
	return r, err
}

func runProxies(ctx context.Context, log *slog.Logger, store conformance.Store, c runConfig) error {
	if err := c.check(); err != nil {
		return err
	}
	all := conformance.Proxies{SwitchyardBin: c.swBin, Deploy: c.deploy, KubeProxyBin: filepath.Join(c.kubeBin, "kube-proxy"), Log: log}
	var selected []conformance.Proxy
	for _, name := range c.proxies {
		p, err := all.Get(strings.TrimSpace(name))
		if err != nil {
			return err
		}
		selected = append(selected, p)
	}
	n, err := openNode(ctx, log, c)
	if err != nil {
		return err
	}
	defer n.Close()
	for _, p := range selected {
		if _, err := conformance.Run(ctx, n, p, all.Others(p), c.e2e, store, log); err != nil {
			return err
		}
	}
	return nil
}
