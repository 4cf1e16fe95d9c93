package conformance

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/switchyard-lb/switchyard/test/node"
)

// RolloutSpec is the traffic RunRollout keeps up across `kubectl rollout
// restart` of the Switchyard DaemonSet.
type RolloutSpec struct {
	// Conns are the established connections held through the restart,
	// each sending a request every ConnPeriod (HTTP keep-alive).
	Conns      int
	ConnPeriod time.Duration
	// RequestPeriod is how often a request goes on a new connection.
	RequestPeriod time.Duration
	// Settle is how long traffic runs before the restart and after it.
	Settle time.Duration
	// Timeout bounds one request (failures only: TCG on a loaded host).
	Timeout time.Duration
}

// RolloutResult is what RunRollout measured.
type RolloutResult struct {
	Conns     int `json:"conns"`
	ConnsLost int `json:"connsLost"`
	// Exchanges are the requests on the established connections.
	Exchanges int `json:"exchanges"`
	// Requests are the requests on new connections.
	Requests       int `json:"requests"`
	RequestsFailed int `json:"requestsFailed"`
	// Restart is from `kubectl rollout restart` to `kubectl rollout
	// status` reporting the new pod available.
	Restart string `json:"restart"`
	// OldPod and NewPod are the daemon's pods before and after.
	OldPod string `json:"oldPod"`
	NewPod string `json:"newPod"`
	// Errors are the first failures seen, for the report.
	Errors     []string  `json:"errors,omitempty"`
	Start      time.Time `json:"start"`
	LoadBefore string    `json:"loadBefore"`
	LoadAfter  string    `json:"loadAfter"`
}

// rolloutNamespace holds the backends RunRollout creates.
const rolloutNamespace = "rollout"

// RunRollout measures what `kubectl rollout restart` of the Switchyard
// DaemonSet costs the traffic it serves (issue 10's done-when: no
// established connection lost). Switchyard must be serving on the node
// (Switchyard Start). It creates two agnhost netexec pods behind a
// NodePort Service in the namespace rollout, opens spec.Conns keep-alive
// connections from the node's namespace to the node's address and the
// NodePort (through the node's IPVS) and a request on a new connection
// every spec.RequestPeriod, restarts the DaemonSet, waits for the rollout
// and keeps the traffic up spec.Settle longer. The namespace is deleted
// at the end.
func RunRollout(ctx context.Context, n *node.Node, spec RolloutSpec, log *slog.Logger) (RolloutResult, error) {
	res := RolloutResult{Conns: spec.Conns, Start: time.Now(), LoadBefore: loadAvg()}
	target, _, err := serviceBackends(ctx, n, rolloutNamespace, log)
	if err != nil {
		return res, err
	}
	defer deleteNamespace(ctx, n, rolloutNamespace, log)
	if res.OldPod, err = daemonPod(ctx, n); err != nil {
		return res, err
	}

	t := &traffic{spec: spec, n: n, target: target}
	tctx, stop := context.WithCancel(ctx)
	defer stop()
	if err := t.start(tctx); err != nil {
		return res, err
	}
	log.Info("traffic up", "target", target, "conns", spec.Conns)
	if err := sleep(ctx, spec.Settle); err != nil {
		return res, err
	}

	began := time.Now()
	log.Info("kubectl rollout restart daemonset/switchyard")
	if out, err := n.Kubectl(ctx, "-n", "switchyard-system", "rollout", "restart", "daemonset/switchyard").CombinedOutput(); err != nil {
		return res, fmt.Errorf("conformance: rollout restart: %w: %s", err, out)
	}
	if out, err := n.Kubectl(ctx, "-n", "switchyard-system", "rollout", "status", "daemonset/switchyard", "--timeout=20m").CombinedOutput(); err != nil {
		return res, fmt.Errorf("conformance: rollout status: %w: %s", err, out)
	}
	res.Restart = time.Since(began).Round(100 * time.Millisecond).String()
	if res.NewPod, err = daemonPod(ctx, n); err != nil {
		return res, err
	}
	log.Info("rollout done", "took", res.Restart, "old", res.OldPod, "new", res.NewPod)
	if err := sleep(ctx, spec.Settle); err != nil {
		return res, err
	}
	stop()
	t.wait()
	res.LoadAfter = loadAvg()
	t.mu.Lock()
	defer t.mu.Unlock()
	res.ConnsLost, res.Exchanges = t.lost, t.exchanges
	res.Requests, res.RequestsFailed = t.requests, t.failed
	res.Errors = t.errors
	if res.NewPod == res.OldPod {
		return res, fmt.Errorf("conformance: the daemon's pod is still %s after the rollout", res.OldPod)
	}
	return res, nil
}

// serviceBackends creates namespace ns, two netexec pods and a NodePort
// Service in it, waits until the Service answers through the node, and
// returns the node address and NodePort, and the ClusterIP and port.
func serviceBackends(ctx context.Context, n *node.Node, ns string, log *slog.Logger) (nodePort, clusterIP string, _ error) {
	c := n.Client.CoreV1()
	if _, err := c.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", "", fmt.Errorf("conformance: %w", err)
	}
	labels := map[string]string{"app": "rollout"}
	for _, name := range []string{"backend-a", "backend-b"} {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec: corev1.PodSpec{
				Containers: []corev1.Container{{
					Name: "agnhost", Image: node.AgnhostImage,
					Args:  []string{"netexec", "--http-port=8080"},
					Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
					ReadinessProbe: &corev1.Probe{
						ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/hostname", Port: intstr.FromInt32(8080)}},
						PeriodSeconds: 2, TimeoutSeconds: 10, // TCG on a loaded host
					},
				}},
			},
		}
		if _, err := c.Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", "", fmt.Errorf("conformance: %w", err)
		}
	}
	svc, err := c.Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "rollout"},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeNodePort, Selector: labels,
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		svc, err = c.Services(ns).Get(ctx, "rollout", metav1.GetOptions{})
	}
	if err != nil {
		return "", "", fmt.Errorf("conformance: %w", err)
	}
	target := net.JoinHostPort(node.NodeIP, strconv.Itoa(int(svc.Spec.Ports[0].NodePort)))
	seen := map[string]bool{}
	wctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	err = poll(wctx, "both backends answering on "+target, func() error {
		body, err := request(wctx, n, target, 30*time.Second)
		if err != nil {
			return err
		}
		seen[body] = true
		if len(seen) < 2 {
			return fmt.Errorf("answered by %v so far", seen)
		}
		return nil
	})
	log.Info("backends up", "target", target, "err", err)
	return target, net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(svc.Spec.Ports[0].Port))), err
}

// deleteNamespace deletes namespace ns and waits until it is gone (even
// when ctx is done), logging a failure: what a run leaves to tidy up.
func deleteNamespace(ctx context.Context, n *node.Node, ns string, log *slog.Logger) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Minute)
	defer cancel()
	if out, err := n.Kubectl(dctx, "delete", "namespace", ns, "--wait=true", "--timeout=10m").CombinedOutput(); err != nil {
		log.Warn("delete the namespace", "namespace", ns, "err", err, "output", strings.TrimSpace(string(out)))
	}
}

// daemonPod returns the name of the Switchyard DaemonSet's running pod.
func daemonPod(ctx context.Context, n *node.Node) (string, error) {
	pods, err := n.Client.CoreV1().Pods("switchyard-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=switchyard"})
	if err != nil {
		return "", fmt.Errorf("conformance: %w", err)
	}
	var running []string
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			running = append(running, p.Name)
		}
	}
	if len(running) != 1 {
		return "", fmt.Errorf("conformance: switchyard pods running: %v, want one", running)
	}
	return running[0], nil
}

// request makes one GET /hostname on a new connection to target from the
// node's namespace and returns the body.
func request(ctx context.Context, n *node.Node, target string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := n.DialContext(ctx, "tcp", target)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	return exchange(bufio.NewReader(conn), conn, "close")
}

// exchange writes a GET /hostname with the Connection header given and
// reads the answer.
func exchange(r *bufio.Reader, w io.Writer, connection string) (string, error) {
	if _, err := fmt.Fprintf(w, "GET /hostname HTTP/1.1\r\nHost: rollout\r\nConnection: %s\r\n\r\n", connection); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %s", resp.Status)
	}
	return strings.TrimSpace(string(body)), nil
}

// traffic is RunRollout's load: spec.Conns keep-alive connections and a
// request on a new connection every spec.RequestPeriod.
type traffic struct {
	spec   RolloutSpec
	n      *node.Node
	target string
	wg     sync.WaitGroup

	mu                                sync.Mutex
	lost, exchanges, requests, failed int
	errors                            []string
}

// maxErrors bounds the failures a report lists.
const maxErrors = 10

func (t *traffic) fail(what string, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.errors) < maxErrors {
		t.errors = append(t.errors, fmt.Sprintf("%s %s: %v", time.Now().UTC().Format("15:04:05.000"), what, err))
	}
}

// start opens the connections (an error if one cannot be opened) and
// runs the traffic until ctx is done.
func (t *traffic) start(ctx context.Context) error {
	for i := range t.spec.Conns {
		dctx, cancel := context.WithTimeout(ctx, t.spec.Timeout)
		conn, err := t.n.DialContext(dctx, "tcp", t.target)
		cancel()
		if err != nil {
			return fmt.Errorf("conformance: connection %d to %s: %w", i, t.target, err)
		}
		t.wg.Go(func() { t.hold(ctx, i, conn) })
	}
	t.wg.Go(func() {
		tick := time.NewTicker(t.spec.RequestPeriod)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			_, err := request(ctx, t.n, t.target, t.spec.Timeout)
			if ctx.Err() != nil {
				return // ended by the stop, not a failure
			}
			t.mu.Lock()
			t.requests++
			if err != nil {
				t.failed++
			}
			t.mu.Unlock()
			if err != nil {
				t.fail("request", err)
			}
		}
	})
	return nil
}

// hold exchanges on conn every spec.ConnPeriod until ctx is done; the
// first failure counts the connection lost and ends it.
func (t *traffic) hold(ctx context.Context, i int, conn net.Conn) {
	defer conn.Close()
	r := bufio.NewReader(conn)
	for {
		conn.SetDeadline(time.Now().Add(t.spec.Timeout))
		_, err := exchange(r, conn, "keep-alive")
		if err != nil && ctx.Err() == nil {
			t.mu.Lock()
			t.lost++
			t.mu.Unlock()
			t.fail(fmt.Sprintf("connection %d", i), err)
			return
		}
		if err == nil {
			t.mu.Lock()
			t.exchanges++
			t.mu.Unlock()
		}
		if sleep(ctx, t.spec.ConnPeriod) != nil {
			return
		}
	}
}

// wait waits for the traffic to end (its context done).
func (t *traffic) wait() { t.wg.Wait() }

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
