//go:build node

package node_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/switchyard-lb/switchyard/test/node"
)

// Environment make test-node sets.
const (
	envKubeBin  = "SWITCHYARD_KUBE_BIN"
	envRootfs   = "SWITCHYARD_NODE_ROOTFS"
	envUserland = "SWITCHYARD_NODE_USERLAND"
	envImage    = "SWITCHYARD_NODE_IMAGE" // make image's docker archive
)

// switchyardImage is the tag test/tools/image/deploy runs.
const switchyardImage = "docker.io/library/switchyard:dev"

// Generous bounds: failures only, never speed (TCG on a loaded host).
const (
	podTimeout  = 10 * time.Minute
	callTimeout = 2 * time.Minute
)

// TestNode brings the node up, runs a pod from the imported agnhost image
// and reaches it from the host namespace, through kubectl exec and from
// the guest; deploys Switchyard as users do (make image's image,
// kubectl apply -k test/tools/image/deploy) and reaches a ClusterIP
// Service through it; then takes the node down.
func TestNode(t *testing.T) {
	ctx := t.Context()
	n := up(t, 1)

	t.Run("ImagesImported", func(t *testing.T) {
		out := guest(t, n, "ctr -n k8s.io images ls -q")
		for _, ref := range []string{node.PauseImage, node.AgnhostImage, node.CoreDNSImage, switchyardImage,
			node.BusyBoxImage, node.DistrolessIptablesImage, node.Regression74839Image} {
			if !slices.Contains(strings.Fields(out), ref) {
				t.Errorf("image %s not in containerd:\n%s", ref, out)
			}
		}
	})

	t.Run("PodAnswers", func(t *testing.T) {
		pod := netexecPod("web")
		created := time.Now()
		if _, err := n.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod: %v", err)
		}
		ip := waitPodReady(t, n, "default", pod.Name)
		t.Logf("pod create -> Ready %s, IP %s", time.Since(created).Round(100*time.Millisecond), ip)

		hctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		body, err := n.PodHTTP(hctx, ip+":8080", "/hostname")
		if err != nil || body != pod.Name {
			t.Errorf("GET http://%s:8080/hostname from the host namespace = %q, %v; want %q", ip, body, err, pod.Name)
		}
		if out := guest(t, n, "busybox wget -qO- http://"+ip+":8080/hostname"); out != pod.Name {
			t.Errorf("GET from the guest = %q, want %q", out, pod.Name)
		}
		began := time.Now()
		out, err := kubectl(t, n, "exec", "-n", "default", pod.Name, "--", "hostname")
		if err != nil || out != pod.Name {
			t.Errorf("kubectl exec %s -- hostname = %q, %v; want %q", pod.Name, out, err, pod.Name)
		}
		t.Logf("kubectl exec round trip %s", time.Since(began).Round(100*time.Millisecond))
	})

	t.Run("SwitchyardClusterIP", func(t *testing.T) {
		applied := time.Now()
		if out, err := kubectl(t, n, "apply", "-k", "../tools/image/deploy"); err != nil {
			t.Fatalf("kubectl apply -k test/tools/image/deploy: %v\n%s", err, out)
		}
		waitDaemonSetReady(t, n, "switchyard-system", "switchyard")
		t.Logf("apply -> Switchyard Ready %s", time.Since(applied).Round(100*time.Millisecond))

		pod := netexecPod("backend")
		if _, err := n.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod: %v", err)
		}
		svc, err := n.Client.CoreV1().Services("default").Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "backend"},
			Spec: corev1.ServiceSpec{
				Selector: pod.Labels,
				Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create service: %v", err)
		}
		waitPodReady(t, n, "default", pod.Name)
		url := "http://" + svc.Spec.ClusterIP + "/hostname"
		waitGuestGet(t, n, url, pod.Name)
		// From inside the pod too: hairpin through its own Service.
		out, err := kubectl(t, n, "exec", "-n", "default", pod.Name, "--", "wget", "-qO-", url)
		if err != nil || out != pod.Name {
			t.Errorf("GET %s from the backend pod itself = %q, %v; want %q", url, out, err, pod.Name)
		}
	})
}

// up brings the node up with guests guests and the switchyard image, and
// takes it down when the test ends (checking the namespace is gone).
func up(t *testing.T, guests int) *node.Node {
	t.Helper()
	kubeBin, rootfs, userland, image := os.Getenv(envKubeBin), os.Getenv(envRootfs), os.Getenv(envUserland), os.Getenv(envImage)
	if kubeBin == "" || rootfs == "" || userland == "" || image == "" {
		t.Fatalf("%s, %s, %s and %s must be set (make test-node sets them)", envKubeBin, envRootfs, envUserland, envImage)
	}
	n, err := node.Up(t.Context(), node.Options{
		KubeBin: kubeBin, Rootfs: rootfs, Userland: userland, Guests: guests,
		Images: []node.Image{{Ref: "switchyard:dev", Path: image}},
		Log:    slog.New(slog.NewTextHandler(testWriter{t}, nil)),
	})
	if err != nil {
		t.Fatalf("node up: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, g := range n.Guests {
				out, _ := g.Exec(context.Background(), "tail -n 40 /var/log/kubelet.log")
				t.Logf("%s kubelet log:\n%s", g.Name, out)
			}
		}
		n.Close()
		if err := node.Down(context.Background(), n.Dir); err != nil {
			t.Errorf("node down: %v", err)
		}
		if _, err := os.Stat("/run/netns/" + node.NetnsName); err == nil {
			t.Errorf("namespace %s left after Down", node.NetnsName)
		}
	})
	t.Logf("node up (%d guests): %s", guests, n.Timings)
	return n
}

// waitGuestGet GETs url from the guest until it answers want. A Service
// reaches the kernel once the proxy sees its EndpointSlice; until then
// its ClusterIP refuses.
func waitGuestGet(t *testing.T, g execer, url, want string) {
	t.Helper()
	deadline := time.Now().Add(podTimeout)
	for {
		// busybox wget: its -T (timeout) option segfaults in Debian 12's busybox-static.
		out, err := guestTry(t, g, "busybox wget -qO- "+url)
		if err == nil && out == want {
			return
		}
		if time.Now().After(deadline) {
			table, _ := guestTry(t, g, "ipvsadm -Ln")
			t.Fatalf("GET %s from the guest = %q, %v; want %q\nIPVS:\n%s", url, out, err, want, table)
		}
		time.Sleep(2 * time.Second)
	}
}

// waitDaemonSetReady waits until every scheduled pod of the DaemonSet is
// ready, at least one, and returns how many are.
func waitDaemonSetReady(t *testing.T, n *node.Node, ns, name string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), podTimeout)
	defer cancel()
	var last string
	for {
		ds, err := n.Client.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			st := ds.Status
			last = fmt.Sprintf("desired %d, ready %d", st.DesiredNumberScheduled, st.NumberReady)
			if st.DesiredNumberScheduled > 0 && st.NumberReady == st.DesiredNumberScheduled {
				return int(st.NumberReady)
			}
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			t.Fatalf("DaemonSet %s/%s not ready after %s (%s)", ns, name, podTimeout, last)
		case <-time.After(2 * time.Second):
		}
	}
}

// netexecPod is agnhost netexec on 8080, Ready once it answers.
func netexecPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:  "agnhost",
				Image: node.AgnhostImage,
				Args:  []string{"netexec", "--http-port=8080"},
				Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/hostname", Port: intstr.FromInt32(8080)}},
					PeriodSeconds: 2,
					// TCG on a loaded host: the default 1 s fails often.
					TimeoutSeconds: 10,
				},
			}},
		},
	}
}

// waitPodReady waits for the pod's Ready condition and returns its IP.
func waitPodReady(t *testing.T, n *node.Node, ns, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), podTimeout)
	defer cancel()
	var last string
	for {
		pod, err := n.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			last = string(pod.Status.Phase)
			for _, c := range pod.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && pod.Status.PodIP != "" {
					return pod.Status.PodIP
				}
			}
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pod %s/%s not Ready after %s (last: %s)", ns, name, podTimeout, last)
		case <-time.After(time.Second):
		}
	}
}

// execer runs a script in a guest: a *node.Node (its first guest) or a
// *node.Guest.
type execer interface {
	Exec(ctx context.Context, script string) (string, error)
}

// guest runs script in the guest and returns its trimmed output.
func guest(t *testing.T, g execer, script string) string {
	t.Helper()
	out, err := guestTry(t, g, script)
	if err != nil {
		t.Fatalf("guest %q: %v", script, err)
	}
	return out
}

// guestTry runs script in the guest within callTimeout.
func guestTry(t *testing.T, g execer, script string) (string, error) {
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	out, err := g.Exec(ctx, script)
	return strings.TrimSpace(out), err
}

// kubectl runs kubectl within callTimeout and returns its trimmed
// standard output, or an error with its standard error.
func kubectl(t *testing.T, n *node.Node, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	out, err := n.Kubectl(ctx, args...).Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		err = fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, ee.Stderr)
	}
	return strings.TrimSpace(string(out)), err
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
