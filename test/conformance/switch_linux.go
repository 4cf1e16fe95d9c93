package conformance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/switchyard-lb/switchyard/test/node"
)

// SwitchSpec is the traffic RunSwitch keeps up while the node switches.
type SwitchSpec struct {
	// RequestPeriod is how often each client sends a request on a new
	// connection: one in the host's namespace to the NodePort, one in the
	// guest (busybox wget) to the ClusterIP.
	RequestPeriod time.Duration
	// Settle is how long traffic runs before a switch and after the new
	// proxy serves again.
	Settle time.Duration
	// Timeout bounds one request (failures only: TCG on a loaded host).
	Timeout time.Duration
	// Recover bounds the wait for the service to come back after a
	// switch.
	Recover time.Duration
}

// SwitchResult is what RunSwitch measured: the node going from upstream
// kube-proxy (IPVS mode) to Switchyard with switchyard
// --cleanup-kube-proxy, and back with switchyard --cleanup.
type SwitchResult struct {
	ToSwitchyard SwitchLeg `json:"toSwitchyard"`
	ToKubeProxy  SwitchLeg `json:"toKubeProxy"`
	// Before is the node's kernel before kube-proxy first ran (the
	// kubelet's own KUBE-* chains are in it).
	Before     KernelState `json:"before"`
	Start      time.Time   `json:"start"`
	LoadBefore string      `json:"loadBefore"`
	LoadAfter  string      `json:"loadAfter"`
}

// SwitchLeg is one switch.
type SwitchLeg struct {
	From string `json:"from"`
	To   string `json:"to"`
	// Stop is how long stopping the old proxy took (its process ended,
	// or kubectl delete -k of the DaemonSet until its pod was gone),
	// Cleanup the cleanup command with the read of the kernel after it,
	// Start the new proxy's start until it reported serving.
	Stop    string `json:"stop"`
	Cleanup string `json:"cleanup"`
	Start   string `json:"start"`
	// NodePort and ClusterIP are what the two clients saw.
	NodePort  Outage `json:"nodePort"`
	ClusterIP Outage `json:"clusterIP"`
	// Left is what the cleanup left of the old proxy's objects; After is
	// the kernel's state right after it.
	Left  []string    `json:"left"`
	After KernelState `json:"after"`
}

func (l SwitchLeg) String() string {
	return fmt.Sprintf("%s -> %s: stop %s, cleanup %s, start %s; NodePort: %s; ClusterIP: %s; left of %s: %d objects",
		l.From, l.To, l.Stop, l.Cleanup, l.Start, l.NodePort, l.ClusterIP, l.From, len(l.Left))
}

// switchNamespace holds the backends RunSwitch creates.
const switchNamespace = "switch"

// RunSwitch measures issue 10's done-when on the node: a node running
// upstream kube-proxy in IPVS mode switches to Switchyard (kube-proxy
// stopped, switchyard --cleanup-kube-proxy, deploy/ applied) and back
// (kubectl delete -k, switchyard --cleanup, kube-proxy started), as a
// user does, with a request on a new connection every
// spec.RequestPeriod to a NodePort (from outside the node) and to the
// ClusterIP (from the node). It reports for each switch the requests
// that failed and the time without service, and fails when a cleanup
// left an object of its proxy (KubeProxyLeft, SwitchyardLeft) or the
// service did not come back within spec.Recover. kube-proxy (IPVS mode)
// runs on the node at the end.
func RunSwitch(ctx context.Context, n *node.Node, all Proxies, spec SwitchSpec, log *slog.Logger) (SwitchResult, error) {
	res := SwitchResult{Start: time.Now(), LoadBefore: loadAvg()}
	sw := switchyard{all}
	kp := kubeProxy{all, "ipvs"}
	cleanupBin, err := putSwitchyard(n, all)
	if err != nil {
		return res, err
	}
	for _, p := range []Proxy{sw, kp} {
		if err := p.Stop(ctx, n); err != nil {
			return res, fmt.Errorf("conformance: stop %s: %w", p.Name(), err)
		}
	}
	if res.Before, err = kernelState(ctx, n, ""); err != nil {
		return res, err
	}
	if err := kp.Start(ctx, n); err != nil {
		return res, fmt.Errorf("conformance: start %s: %w", kp.Name(), err)
	}
	nodePort, clusterIP, err := serviceBackends(ctx, n, switchNamespace, log)
	if err != nil {
		return res, err
	}
	defer deleteNamespace(ctx, n, switchNamespace, log)
	log.Info("kube-proxy serving", "nodePort", nodePort, "clusterIP", clusterIP)

	leg := func(from, to Proxy, stop func() error, cleanup string, left func(KernelState) []string) (SwitchLeg, error) {
		l := SwitchLeg{From: from.Name(), To: to.Name()}
		c := &clients{n: n, spec: spec, nodePort: nodePort, clusterIP: clusterIP}
		if err := c.start(ctx); err != nil {
			return l, err
		}
		defer c.stop()
		if err := sleep(ctx, spec.Settle); err != nil {
			return l, err
		}
		if !c.answeredSince(time.Time{}) {
			return l, fmt.Errorf("conformance: %s does not serve %s before the switch", from.Name(), nodePort)
		}
		log.Info("switching", "from", from.Name(), "to", to.Name())
		began := time.Now()
		if err := stop(); err != nil {
			return l, err
		}
		l.Stop = since(began)
		began = time.Now()
		if l.After, err = kernelState(ctx, n, cleanupBin+" "+cleanup); err != nil {
			return l, err
		}
		l.Cleanup = since(began)
		cleaned := time.Now()
		l.Left = left(l.After)
		began = time.Now()
		if err := to.Start(ctx, n); err != nil {
			return l, fmt.Errorf("conformance: start %s: %w", to.Name(), err)
		}
		l.Start = since(began)
		rctx, cancel := context.WithTimeout(ctx, spec.Recover)
		err := poll(rctx, nodePort+" answering through "+to.Name(), func() error {
			if !c.answeredSince(cleaned) {
				return errors.New("no answer since the cleanup")
			}
			return nil
		})
		cancel()
		if err != nil {
			return l, err
		}
		if err := sleep(ctx, spec.Settle); err != nil {
			return l, err
		}
		l.NodePort, l.ClusterIP, err = c.stop()
		log.Info("switched", "result", l.String(), "left", l.Left)
		if err == nil && len(l.Left) > 0 {
			err = fmt.Errorf("conformance: %s left of %s: %s", cleanup, from.Name(), strings.Join(l.Left, ", "))
		}
		if err == nil && !(l.NodePort.Recovered && l.ClusterIP.Recovered) {
			err = fmt.Errorf("conformance: the service did not recover through %s: %s", to.Name(), l)
		}
		return l, err
	}

	res.ToSwitchyard, err = leg(kp, sw, func() error { return kp.kill(ctx, n) }, "--cleanup-kube-proxy",
		func(k KernelState) []string { return KubeProxyLeft(res.Before, k) })
	if err != nil {
		return res, err
	}
	res.ToKubeProxy, err = leg(sw, kp, func() error { return sw.delete(ctx, n) }, "--cleanup", SwitchyardLeft)
	res.LoadAfter = loadAvg()
	return res, err
}

// putSwitchyard copies the static daemon to the guest for the cleanups
// and returns its path there.
func putSwitchyard(n *node.Node, all Proxies) (string, error) {
	bin, err := os.ReadFile(all.SwitchyardBin)
	if err != nil {
		return "", fmt.Errorf("conformance: switchyard binary (make image): %w", err)
	}
	return n.PutFile("switchyard", bin, 0o755)
}

// kernelState runs first (a cleanup; none when empty), then reads the
// node's kernel state in the same guest command, so the read adds no
// round trip to a switch.
func kernelState(ctx context.Context, n *node.Node, first string) (KernelState, error) {
	script := kernelStateScript
	if first != "" {
		script = first + " >/run/switch-cleanup.log 2>&1 || { cat /run/switch-cleanup.log; exit 3; }\n" + script
	}
	out, err := n.Exec(ctx, script)
	if err != nil {
		return KernelState{}, fmt.Errorf("conformance: %s: %w", strings.TrimSpace(first+" (kernel state)"), err)
	}
	return ParseKernelState(out)
}

// clients are RunSwitch's two request loops: the host's to the NodePort
// and the guest's to the ClusterIP (a shell loop whose log is read at
// the end: the guest's clock times those samples).
type clients struct {
	n                   *node.Node
	spec                SwitchSpec
	nodePort, clusterIP string

	wg       sync.WaitGroup
	cancel   context.CancelFunc
	mu       sync.Mutex
	samples  []Sample
	stopped  bool
	outcomes [2]Outage
	err      error
}

const (
	guestClientPid   = "/run/switch-client.pid"
	guestClientLog   = "/run/switch-client.log"
	guestClientProbe = "/run/switch-client.sh"
)

func (c *clients) start(ctx context.Context) error {
	period := fmt.Sprintf("%.1f", c.spec.RequestPeriod.Seconds())
	timeout := max(1, int(c.spec.Timeout.Seconds()))
	host, port, err := net.SplitHostPort(c.clusterIP)
	if err != nil {
		return fmt.Errorf("conformance: the ClusterIP %q: %w", c.clusterIP, err)
	}
	// One request is a bash /dev/tcp exchange: the rootfs's static
	// busybox wget segfaults in the guest, and nothing else there speaks
	// HTTP.
	script := fmt.Sprintf(`rm -f %[1]s
cat >%[6]s <<'PROBE'
exec 3<>/dev/tcp/%[3]s/%[7]s || exit 1
printf 'GET /hostname HTTP/1.0\r\nHost: switch\r\n\r\n' >&3
head -n1 <&3 | grep -q '^HTTP/1\.[01] 200'
PROBE
setsid sh -c 'while :; do t=$(date +%%s.%%N); if timeout %[2]d bash %[6]s 2>/dev/null; then echo "$t 1"; else echo "$t 0"; fi; sleep %[4]s; done' >%[1]s 2>/dev/null </dev/null &
echo $! >%[5]s`, guestClientLog, timeout, host, period, guestClientPid, guestClientProbe, port)
	if _, err := c.n.Exec(ctx, script); err != nil {
		return fmt.Errorf("conformance: start the guest's client: %w", err)
	}
	ctx, c.cancel = context.WithCancel(ctx)
	c.wg.Go(func() {
		tick := time.NewTicker(c.spec.RequestPeriod)
		defer tick.Stop()
		for {
			at := time.Now()
			_, err := request(ctx, c.n, c.nodePort, c.spec.Timeout)
			if ctx.Err() != nil {
				return
			}
			c.mu.Lock()
			c.samples = append(c.samples, Sample{At: at, OK: err == nil})
			c.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	return nil
}

// answeredSince says whether the host's client had an answer to a
// request sent after t.
func (c *clients) answeredSince(t time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(c.samples) - 1; i >= 0 && c.samples[i].At.After(t); i-- {
		if c.samples[i].OK {
			return true
		}
	}
	return false
}

// stop ends both clients (once) and returns what each saw.
func (c *clients) stop() (nodePort, clusterIP Outage, _ error) {
	c.mu.Lock()
	if c.stopped {
		defer c.mu.Unlock()
		return c.outcomes[0], c.outcomes[1], c.err
	}
	c.stopped = true
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := c.n.Exec(ctx, fmt.Sprintf("kill $(cat %[1]s); rm -f %[1]s; cat %[2]s", guestClientPid, guestClientLog))
	var guest []Sample
	if err == nil {
		guest, err = ParseGuestSamples(out)
	}
	if err != nil {
		err = fmt.Errorf("conformance: the guest's client: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.outcomes = [2]Outage{MeasureOutage(c.samples), MeasureOutage(guest)}
	c.err = err
	return c.outcomes[0], c.outcomes[1], err
}

func since(t time.Time) string { return time.Since(t).Round(100 * time.Millisecond).String() }
