package conformance

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchyard-lb/switchyard/test/node"
)

// BootstrapResult is what RunBootstrap saw.
type BootstrapResult struct {
	// Without is the daemon's state after waiting without the API
	// server's address (its pod not Ready), with the log lines that
	// name the kubernetes Service's ClusterIP.
	Without    string   `json:"without"`
	WithoutLog []string `json:"withoutLog"`
	// With is how long the daemon's pod took from its start to Ready
	// with the address, and the IPVS service it then programmed for the
	// kubernetes Service.
	With        string `json:"with"`
	KubeService string `json:"kubeService"`
}

// RunBootstrap proves deploy/'s answer to the bootstrap trap on the node:
// an in-cluster client dials the kubernetes Service's ClusterIP, which
// only a service proxy makes work. With no proxy on the node (every
// proxy in stop stopped through its cleanup) and the lab's stand-in for
// that ClusterIP removed (node.SetServiceIPOnHost, put back at the end),
// Switchyard is deployed from deploy (test/tools/image/deploy) and its
// pod restarted without the switchyard-apiserver ConfigMap: it must stay
// unready for wait, stuck on the ClusterIP. Then the ConfigMap is applied
// again and the pod restarted: it must turn Ready and program the
// kubernetes Service. Switchyard stays deployed.
func RunBootstrap(ctx context.Context, n *node.Node, sw Proxy, stop []Proxy, deploy string, wait time.Duration, log *slog.Logger) (BootstrapResult, error) {
	var res BootstrapResult
	for _, p := range append(stop, sw) {
		if err := p.Stop(ctx, n); err != nil {
			return res, fmt.Errorf("conformance: stop %s: %w", p.Name(), err)
		}
	}
	if err := node.SetServiceIPOnHost(false); err != nil {
		return res, err
	}
	defer func() {
		if err := node.SetServiceIPOnHost(true); err != nil {
			log.Error("put the kubernetes Service's address back on the host", "err", err)
		}
	}()
	kubectl := func(args ...string) error {
		if out, err := n.Kubectl(ctx, args...).CombinedOutput(); err != nil {
			return fmt.Errorf("conformance: kubectl %s: %w: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	restartPod := func() (time.Time, error) {
		began := time.Now()
		return began, kubectl("-n", "switchyard-system", "delete", "pod", "-l", "app.kubernetes.io/name=switchyard", "--wait=true", "--timeout=10m")
	}

	// Without the address: stuck.
	if err := kubectl("apply", "-k", deploy); err != nil {
		return res, err
	}
	if err := kubectl("-n", "switchyard-system", "delete", "configmap", "switchyard-apiserver"); err != nil {
		return res, err
	}
	if _, err := restartPod(); err != nil {
		return res, err
	}
	log.Info("daemon restarted without the API server's address", "watching", wait)
	if err := sleep(ctx, wait); err != nil {
		return res, err
	}
	ready, state, err := daemonReady(ctx, n)
	if err != nil {
		return res, err
	}
	res.Without = state
	logs, _ := n.Kubectl(ctx, "-n", "switchyard-system", "logs", "daemonset/switchyard", "-c", "switchyard").CombinedOutput()
	for _, l := range strings.Split(string(logs), "\n") {
		if strings.Contains(l, node.KubernetesServiceIP) && len(res.WithoutLog) < 3 {
			res.WithoutLog = append(res.WithoutLog, l)
		}
	}
	if ready {
		return res, fmt.Errorf("conformance: the daemon turned Ready without the API server's address and without a proxy (%s): the trap did not show", state)
	}

	// With it: Ready.
	if err := kubectl("apply", "-k", deploy); err != nil {
		return res, err
	}
	began, err := restartPod()
	if err != nil {
		return res, err
	}
	if err := poll(ctx, "the daemon Ready with the API server's address", func() error {
		ready, state, err := daemonReady(ctx, n)
		if err == nil && !ready {
			err = fmt.Errorf("%s", state)
		}
		return err
	}); err != nil {
		return res, err
	}
	res.With = time.Since(began).Round(time.Second).String()
	out, err := n.Exec(ctx, "ipvsadm -Ln -t "+node.KubernetesServiceIP+":443")
	if err != nil {
		return res, fmt.Errorf("conformance: the kubernetes Service in IPVS: %w", err)
	}
	res.KubeService = strings.TrimSpace(out)
	return res, nil
}

// daemonReady says whether the Switchyard DaemonSet's pods are all Ready,
// and how it stands.
func daemonReady(ctx context.Context, n *node.Node) (bool, string, error) {
	ds, err := n.Client.AppsV1().DaemonSets("switchyard-system").Get(ctx, "switchyard", metav1.GetOptions{})
	if err != nil {
		return false, "", fmt.Errorf("conformance: %w", err)
	}
	st := ds.Status
	state := fmt.Sprintf("desired %d, ready %d", st.DesiredNumberScheduled, st.NumberReady)
	return st.DesiredNumberScheduled > 0 && st.NumberReady == st.DesiredNumberScheduled, state, nil
}
