package conformance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchyard-lb/switchyard/test/node"
)

// Proxy is a service proxy the node runs during one e2e.test run.
type Proxy interface {
	Name() string
	// Start deploys the proxy and returns once it serves.
	Start(ctx context.Context, n *node.Node) error
	// Stop removes the proxy and, through the cleanup path a user runs
	// when switching, what it left in the kernel. It succeeds when the
	// proxy is not there.
	Stop(ctx context.Context, n *node.Node) error
}

// Proxies are the proxies make conformance knows, with what they need.
type Proxies struct {
	// SwitchyardBin is the static daemon (make image's), which the
	// cleanups run in the guest as a user runs it on a node.
	SwitchyardBin string
	// Deploy is the kustomization that deploys Switchyard with the
	// imported image (test/tools/image/deploy).
	Deploy string
	// KubeProxyBin is upstream's static kube-proxy
	// (test/tools/kube-binaries.sh --kube-proxy).
	KubeProxyBin string
	Log          *slog.Logger
}

// Get returns the proxy called name (KubeProxyIPVS, KubeProxyNFTables,
// Switchyard).
func (p Proxies) Get(name string) (Proxy, error) {
	switch name {
	case Switchyard:
		return switchyard{p}, nil
	case KubeProxyIPVS:
		return kubeProxy{p, "ipvs"}, nil
	case KubeProxyNFTables:
		return kubeProxy{p, "nftables"}, nil
	}
	return nil, fmt.Errorf("conformance: unknown proxy %q (want %s, %s or %s)", name, KubeProxyIPVS, KubeProxyNFTables, Switchyard)
}

// Others are what to stop before running proxy: one of each other kind
// (a kube-proxy's Stop ends whichever mode runs, and its Start ends a
// kube-proxy left running).
func (p Proxies) Others(proxy Proxy) []Proxy {
	if proxy.Name() == Switchyard {
		return []Proxy{kubeProxy{p, "ipvs"}}
	}
	return []Proxy{switchyard{p}}
}

// cleanup runs `switchyard FLAG` in every guest (--cleanup or
// --cleanup-kube-proxy) and logs what it printed.
func (p Proxies) cleanup(ctx context.Context, n *node.Node, flag string) error {
	bin, err := os.ReadFile(p.SwitchyardBin)
	if err != nil {
		return fmt.Errorf("conformance: switchyard binary (make image): %w", err)
	}
	path, err := n.PutFile("switchyard", bin, 0o755)
	if err != nil {
		return err
	}
	for _, g := range n.Guests {
		began := time.Now()
		out, err := g.Exec(ctx, path+" "+flag)
		if err != nil {
			return fmt.Errorf("conformance: switchyard %s on %s: %w", flag, g.Name, err)
		}
		p.Log.Info("cleanup", "node", g.Name, "cmd", "switchyard "+flag, "elapsed", time.Since(began).Round(100*time.Millisecond), "output", strings.TrimSpace(out))
	}
	return nil
}

// switchyard is deployed as users deploy it: kubectl apply -k of deploy/
// with the image make image built.
type switchyard struct{ Proxies }

func (switchyard) Name() string { return Switchyard }

func (s switchyard) Start(ctx context.Context, n *node.Node) error {
	if out, err := n.Kubectl(ctx, "apply", "-k", s.Deploy).CombinedOutput(); err != nil {
		return fmt.Errorf("conformance: kubectl apply -k %s: %w: %s", s.Deploy, err, out)
	}
	return poll(ctx, "the switchyard DaemonSet Ready", func() error {
		ds, err := n.Client.AppsV1().DaemonSets("switchyard-system").Get(ctx, "switchyard", metav1.GetOptions{})
		if err != nil {
			return err
		}
		st := ds.Status
		if st.DesiredNumberScheduled == 0 || st.NumberReady != st.DesiredNumberScheduled || st.UpdatedNumberScheduled != st.DesiredNumberScheduled {
			return fmt.Errorf("desired %d, updated %d, ready %d", st.DesiredNumberScheduled, st.UpdatedNumberScheduled, st.NumberReady)
		}
		return nil
	})
}

// Stop deletes what apply created (the namespace with it), waits for the
// daemon's pod to be gone, then runs switchyard --cleanup on the node.
func (s switchyard) Stop(ctx context.Context, n *node.Node) error {
	if err := s.delete(ctx, n); err != nil {
		return err
	}
	return s.cleanup(ctx, n, "--cleanup")
}

// delete deletes what apply created and waits for the daemon's pod to be
// gone; what it programmed stays in the kernel.
func (s switchyard) delete(ctx context.Context, n *node.Node) error {
	if out, err := n.Kubectl(ctx, "delete", "-k", s.Deploy, "--ignore-not-found", "--wait=true", "--timeout=15m").CombinedOutput(); err != nil {
		return fmt.Errorf("conformance: kubectl delete -k %s: %w: %s", s.Deploy, err, out)
	}
	return nil
}

// kubeProxy is upstream's kube-proxy in mode (ipvs, nftables) as upstream
// ships it: the static binary with a KubeProxyConfiguration, run as a
// process on each node (kubeadm would run the same binary in a hostNetwork
// DaemonSet pod), as system:kube-proxy.
type kubeProxy struct {
	Proxies
	mode string
}

func (k kubeProxy) Name() string { return "kube-proxy-" + k.mode }

// kubeProxyPidFile is where the guest keeps the running kube-proxy's pid
// (tmpfs: a reboot forgets it with the process).
const kubeProxyPidFile = "/run/kube-proxy.pid"

// kubeProxyConfig is the KubeProxyConfiguration for mode on the node
// called name: upstream's defaults but for the mode, the lab's pod
// network as the cluster CIDR and the node's name.
func kubeProxyConfig(mode, name string) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: /mnt/host/%s
mode: %s
clusterCIDR: %s
hostnameOverride: %s
`, node.KubeProxyKubeconfig, mode, node.ClusterPodCIDR, name)
}

func (k kubeProxy) Start(ctx context.Context, n *node.Node) error {
	bin, err := os.ReadFile(k.KubeProxyBin)
	if err != nil {
		return fmt.Errorf("conformance: kube-proxy binary (test/tools/kube-binaries.sh --kube-proxy): %w", err)
	}
	binPath, err := n.PutFile("kube-proxy", bin, 0o755)
	if err != nil {
		return err
	}
	if err := k.kill(ctx, n); err != nil {
		return err
	}
	for _, g := range n.Guests {
		if err := k.start(ctx, g, binPath); err != nil {
			return err
		}
	}
	return nil
}

// start starts kube-proxy on guest g, its binary at binPath there, and
// waits until it serves.
func (k kubeProxy) start(ctx context.Context, g *node.Guest, binPath string) error {
	cfgPath, err := g.PutFile("kube-proxy-"+k.mode+".yaml", []byte(kubeProxyConfig(k.mode, g.Name)), 0o644)
	if err != nil {
		return err
	}
	logFile := "/var/log/" + k.Name() + ".log"
	script := fmt.Sprintf("setsid %s --config=%s --v=2 >>%s 2>&1 </dev/null & echo $! >%s", binPath, cfgPath, logFile, kubeProxyPidFile)
	if _, err := g.Exec(ctx, script); err != nil {
		return fmt.Errorf("conformance: start %s on %s: %w", k.Name(), g.Name, err)
	}
	// /healthz answers 200 once kube-proxy has synced its rules.
	return poll(ctx, k.Name()+" healthy on "+g.Name, func() error {
		out, err := g.Exec(ctx, fmt.Sprintf("kill -0 $(cat %s) || { echo exited; tail -n 20 %s; exit 2; }; busybox wget -qO- http://127.0.0.1:10256/healthz", kubeProxyPidFile, logFile))
		var ee *node.ExitError
		if errors.As(err, &ee) && ee.Code == 2 {
			return fmt.Errorf("%w: %s", errGone, out)
		}
		return err
	})
}

// Stop ends kube-proxy, in whichever mode it runs, then runs switchyard
// --cleanup-kube-proxy, as a user switching the node to Switchyard does.
func (k kubeProxy) Stop(ctx context.Context, n *node.Node) error {
	if err := k.kill(ctx, n); err != nil {
		return err
	}
	return k.cleanup(ctx, n, "--cleanup-kube-proxy")
}

// kill ends the running kube-proxy on every guest, if any (SIGTERM, then
// waits).
func (k kubeProxy) kill(ctx context.Context, n *node.Node) error {
	script := fmt.Sprintf(`if [ -e %[1]s ]; then
	p=$(cat %[1]s)
	kill $p 2>/dev/null
	while kill -0 $p 2>/dev/null; do sleep 0.5; done
	rm -f %[1]s
fi`, kubeProxyPidFile)
	for _, g := range n.Guests {
		if _, err := g.Exec(ctx, script); err != nil {
			return fmt.Errorf("conformance: stop kube-proxy on %s: %w", g.Name, err)
		}
	}
	return nil
}

var errGone = errors.New("exited")

// poll calls try every 3 s until it succeeds, fails with errGone or ctx
// ends: the bound is the caller's, generous (TCG on a loaded host).
func poll(ctx context.Context, what string, try func() error) error {
	var last error
	for {
		if last = try(); last == nil {
			return nil
		}
		if errors.Is(last, errGone) {
			return fmt.Errorf("conformance: waiting for %s: %w", what, last)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("conformance: waiting for %s: %w (last: %w)", what, ctx.Err(), last)
		case <-time.After(3 * time.Second):
		}
	}
}
