package node

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/switchyard-lb/switchyard/test/lab"
	"github.com/switchyard-lb/switchyard/test/netns"
)

// The node's fixed names and addresses. The namespace keeps them off the
// host's own network.
const (
	NetnsName = "switchyard-node"
	TapName   = "synode0"
	HostIP    = "192.168.100.1" // the tap, where the API server listens
	NodeIP    = "192.168.100.2" // the guest's NIC, the Node's InternalIP
	PrefixLen = 24
	NodeMAC   = "52:54:00:53:59:02"
	NodeName  = "node1"
	// APIPort is 443 and the namespace also holds KubernetesServiceIP, so
	// that in-cluster clients (a service proxy's DaemonSet among them)
	// reach the API server at the kubernetes Service's ClusterIP before any
	// service proxy runs: the guest routes it to the host, which answers
	// it as its own address, with no NAT. Once a proxy programs the
	// Service, the guest's own dataplane takes that traffic.
	APIPort             = 443
	PodCIDR             = "10.244.0.0/24"
	ServiceCIDR         = "10.96.0.0/16"
	KubernetesServiceIP = "10.96.0.1"
	ClusterDNSIP        = "10.96.0.10"
)

const netnsPath = "/run/netns/" + NetnsName

// Options say where the node's inputs are. Paths are what the Makefile's
// scripts print (test/node/node.mk).
type Options struct {
	// Dir is the state directory (PKI, etcd, logs, the share, pids).
	// Default DefaultDir().
	Dir string
	// KubeBin holds etcd, kube-apiserver, kube-controller-manager,
	// kube-scheduler, kubectl, kubelet, agnhost and coredns
	// (test/tools/kube-binaries.sh --kubelet --control-plane --agnhost --coredns).
	KubeBin string
	// Rootfs is the ext4 image test/node/rootfs.sh prints.
	Rootfs string
	// Userland is the tar of agnhost's userland test/node/userland.sh
	// prints.
	Userland string
	// Lab is the kernel lab's configuration (kernel, busybox).
	Lab lab.Config
	// Images are docker archives imported besides pause and agnhost
	// (make image's bin/image/switchyard.tar), by reference.
	Images []Image
	// MemoryMB and CPUs size the guest: default 2048 and 2.
	MemoryMB, CPUs int
	// Timeout bounds Up: default 30 minutes. A first boot imports the
	// images under TCG: at load average 37 agnhost's import alone took
	// 10 minutes and CoreDNS's 3 more, and 15 minutes ran out before
	// Switchyard's (2026-12-03).
	Timeout time.Duration
	// Log receives progress; default discards.
	Log *slog.Logger
}

// DefaultDir is $SWITCHYARD_CACHE/node/run.
func DefaultDir() string { return filepath.Join(cacheDir(), "run") }

// cacheDir is $SWITCHYARD_CACHE/node, where rootfs.sh keeps its images.
func cacheDir() string { return filepath.Join(filepath.Dir(lab.DefaultCacheDir()), "node") }

// Node is a running node.
type Node struct {
	Dir string
	// Kubeconfig is the admin kubeconfig (system:masters). Its server,
	// HostIP, is reachable only inside the namespace: use Command for
	// kubectl, or Admin, whose dialer enters it.
	Kubeconfig string
	// KubeBin is Options.KubeBin (kubectl is there).
	KubeBin string
	Admin   *rest.Config
	Client  kubernetes.Interface
	// Timings of Up, for reports.
	Timings Timings

	ns *netns.Unnamed
}

// Timings are what Up measured.
type Timings struct {
	ControlPlane time.Duration // namespace and control plane up to /readyz
	BootToReady  time.Duration // qemu start to the Node Ready
	BootToImages time.Duration // qemu start to the images imported
	// Guest stages, the guest's uptime when guest/init.sh reached them.
	GuestInit, GuestContainerd, GuestKubelet float64
}

func (t Timings) String() string {
	return fmt.Sprintf("control plane %s; qemu start -> Node Ready %s, -> images imported %s; guest uptime at init %.1fs, containerd %.1fs, kubelet start %.1fs",
		t.ControlPlane.Round(100*time.Millisecond), t.BootToReady.Round(100*time.Millisecond), t.BootToImages.Round(100*time.Millisecond),
		t.GuestInit, t.GuestContainerd, t.GuestKubelet)
}

// Up brings the node up: the namespace with the tap, the control plane,
// then the guest, and waits until the Node is Ready and the images are
// imported. On error everything it started is stopped again (Down).
func Up(ctx context.Context, o Options) (_ *Node, err error) {
	o = o.withDefaults()
	log := o.Log
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if procs := readProcs(o.Dir); len(procs) > 0 {
		return nil, fmt.Errorf("node: already up (%s runs, pid %d): take it down first (make node-down)", procs[0].Name, procs[0].PID)
	}
	for _, b := range []string{etcdBin, apiServerBin, ctrlMgrBin, schedulerBin, kubeletBin, kubectlBin, "agnhost", "coredns"} {
		if _, err := os.Stat(filepath.Join(o.KubeBin, b)); err != nil {
			return nil, fmt.Errorf("node: %s (test/tools/kube-binaries.sh --kubelet --control-plane --agnhost --coredns): %w", b, err)
		}
	}
	assets, err := lab.EnsureAssets(ctx, o.Lab)
	if err != nil {
		return nil, fmt.Errorf("node: kernel: %w", err)
	}
	busybox := o.Lab.Busybox
	if busybox == "" {
		busybox = "/bin/busybox"
	}
	cache := cacheDir()
	initrd, err := writeBootInitramfs(cache, assets.Kernel, busybox)
	if err != nil {
		return nil, err
	}
	disk, err := ensureDisk(cache, o.Rootfs)
	if err != nil {
		return nil, err
	}
	images, err := EnsureImages(ctx, filepath.Join(cache, "images"), o.KubeBin, o.Userland)
	if err != nil {
		return nil, err
	}
	images = append(images, o.Images...)

	// A fresh state directory: the PKI, etcd and the share are per run.
	if err := os.RemoveAll(o.Dir); err != nil {
		return nil, fmt.Errorf("node: clear %s: %w", o.Dir, err)
	}
	share := filepath.Join(o.Dir, "share")
	if err := os.MkdirAll(share, 0o755); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	if err := writePKI(o.Dir, share); err != nil {
		return nil, err
	}
	if err := writeShare(share, o.KubeBin, images); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(o.Dir, "kube-bin"), []byte(o.KubeBin), 0o644); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\nguest console (last lines):\n%s", err, tail(filepath.Join(o.Dir, "console.log"), 30))
			_ = Down(context.Background(), o.Dir)
		}
	}()

	began := time.Now()
	if err := createNetns(); err != nil {
		return nil, err
	}
	n, err := Open(o.Dir)
	if err != nil {
		return nil, err
	}
	// etcd and kube-apiserver first: kube-controller-manager exits when it
	// cannot read the API server's authentication ConfigMap within 10 s
	// (seen under load).
	cp := controlPlane(o.Dir, o.KubeBin)
	for i, argv := range cp {
		if i == 2 {
			if err := n.waitAPIServer(ctx); err != nil {
				return nil, err
			}
		}
		if _, err := startProc(o.Dir, filepath.Base(argv[0]), argv, os.Environ()); err != nil {
			return nil, err
		}
	}
	n.Timings.ControlPlane = time.Since(began)
	log.Info("control plane ready", "elapsed", n.Timings.ControlPlane.Round(time.Millisecond))

	console := filepath.Join(o.Dir, "console.log")
	booted := time.Now()
	if _, err := startProc(o.Dir, "qemu", qemuArgv(o, assets.Vmlinux, initrd, disk, share, console), os.Environ()); err != nil {
		return nil, err
	}
	log.Info("guest booting", "disk", disk)
	if err := n.waitNodeReady(ctx); err != nil {
		return nil, err
	}
	n.Timings.BootToReady = time.Since(booted)
	log.Info("node Ready", "elapsed", n.Timings.BootToReady.Round(time.Millisecond))
	if err := poll(ctx, "the images imported", func() error {
		if b, err := os.ReadFile(filepath.Join(share, "state", "import-failed")); err == nil {
			return fmt.Errorf("%w: import failed: %s", errGone, strings.TrimSpace(string(b)))
		}
		if _, ok := n.guestMark("images"); !ok {
			return errors.New("not yet")
		}
		return nil
	}, n.checkGuest); err != nil {
		return nil, err
	}
	n.Timings.BootToImages = time.Since(booted)
	n.Timings.GuestInit, _ = n.guestMark("init")
	n.Timings.GuestContainerd, _ = n.guestMark("containerd")
	n.Timings.GuestKubelet, _ = n.guestMark("kubelet")
	log.Info("images imported", "elapsed", n.Timings.BootToImages.Round(time.Millisecond))
	if err := n.ApplyDNS(ctx); err != nil {
		return nil, err
	}
	return n, nil
}

func (o Options) withDefaults() Options {
	if o.Dir == "" {
		o.Dir = DefaultDir()
	}
	if o.MemoryMB == 0 {
		o.MemoryMB = 2048
	}
	if o.CPUs == 0 {
		o.CPUs = 2
	}
	if o.Timeout == 0 {
		o.Timeout = 30 * time.Minute
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o
}

// Open attaches to the node whose state is in dir (Up's Options.Dir), as
// a later command does.
func Open(dir string) (*Node, error) {
	ns, err := netns.OpenPath(NetnsName, netnsPath)
	if err != nil {
		return nil, fmt.Errorf("node: is it up? %w", err)
	}
	kubeBin, _ := os.ReadFile(filepath.Join(dir, "kube-bin"))
	n := &Node{Dir: dir, Kubeconfig: adminKubeconfig(dir), KubeBin: string(kubeBin), ns: ns}
	cfg, err := clientcmd.BuildConfigFromFlags("", n.Kubeconfig)
	if err != nil {
		ns.Close()
		return nil, fmt.Errorf("node: admin kubeconfig: %w", err)
	}
	cfg.Dial = ns.DialContext
	cfg.QPS, cfg.Burst = 100, 200
	n.Admin = cfg
	if n.Client, err = kubernetes.NewForConfig(cfg); err != nil {
		ns.Close()
		return nil, fmt.Errorf("node: admin client: %w", err)
	}
	return n, nil
}

// Close releases the handles; the node keeps running.
func (n *Node) Close() { n.ns.Close() }

// DialContext connects from inside the node's namespace (the host side
// of the tap), where node and pod addresses are reachable.
func (n *Node) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return n.ns.DialContext(ctx, network, addr)
}

// Command is a host command inside the node's namespace (nsenter), with
// KUBECONFIG set to the admin kubeconfig: kubectl, e2e.test, curl to a pod.
func (n *Node) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + netnsPath, "--", name}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+n.Kubeconfig)
	return cmd
}

// Kubectl is kubectl with the admin kubeconfig in the node's namespace.
func (n *Node) Kubectl(ctx context.Context, args ...string) *exec.Cmd {
	return n.Command(ctx, filepath.Join(n.KubeBin, kubectlBin), args...)
}

// waitNodeReady waits for the Node object's Ready condition.
func (n *Node) waitNodeReady(ctx context.Context) error {
	return poll(ctx, "Node "+NodeName+" Ready", func() error { return n.Ready(ctx) }, n.checkGuest)
}

// Ready says whether the Node is Ready now: nil, or why not. A command
// that Opens a node checks it is really up with it.
func (n *Node) Ready(ctx context.Context) error {
	node, err := n.Client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status == corev1.ConditionTrue {
				return nil
			}
			return fmt.Errorf("condition Ready is %s: %s", c.Status, c.Message)
		}
	}
	return errors.New("no Ready condition yet")
}

// checkProcs fails when a control-plane process died.
func (n *Node) checkProcs() error {
	alive := map[string]bool{}
	for _, p := range readProcs(n.Dir) {
		alive[p.Name] = true
	}
	entries, _ := os.ReadDir(filepath.Join(n.Dir, "pids"))
	for _, e := range entries {
		if !alive[e.Name()] {
			return fmt.Errorf("%s %w; its log ends:\n%s", e.Name(), errGone, tail(logPath(n.Dir, e.Name()), 20))
		}
	}
	return nil
}

// checkGuest is checkProcs, qemu included, plus the boot's own failures.
func (n *Node) checkGuest() error {
	if err := n.checkProcs(); err != nil {
		return err
	}
	if c := n.consoleTail(5); strings.Contains(c, "node boot:") && !strings.Contains(c, "switching root") {
		return fmt.Errorf("boot failed: %s", c)
	}
	return nil
}

// Down stops the node whose state is in dir: the guest is asked to sync
// and power off (its disk is kept), then every recorded process is
// stopped and the namespace deleted. It succeeds when nothing runs.
func Down(ctx context.Context, dir string) error {
	procs := readProcs(dir)
	for _, p := range procs {
		if p.Name != "qemu" {
			continue
		}
		if n, err := Open(dir); err == nil {
			ectx, cancel := context.WithTimeout(ctx, 30*time.Second)
			_, _ = n.Exec(ectx, "sync; (sleep 1; busybox poweroff -f) >/dev/null 2>&1 &")
			cancel()
			n.Close()
		}
		deadline := time.Now().Add(60 * time.Second)
		for p.alive() && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
		}
		p.stop(10 * time.Second)
	}
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Go(func() { p.stop(10 * time.Second) })
	}
	wg.Wait()
	deleteNetns()
	if left := readProcs(dir); len(left) > 0 {
		return fmt.Errorf("node: %s (pid %d) still runs", left[0].Name, left[0].PID)
	}
	return nil
}

// createNetns makes the namespace with lo up (and KubernetesServiceIP on
// it, see APIPort), the tap with HostIP and the route to the pod network
// via the node. A namespace left by a node that
// is no longer running is replaced.
func createNetns() error {
	deleteNetns()
	for _, argv := range [][]string{
		{"ip", "netns", "add", NetnsName},
		{"ip", "-n", NetnsName, "link", "set", "lo", "up"},
		{"ip", "-n", NetnsName, "tuntap", "add", "dev", TapName, "mode", "tap"},
		{"ip", "-n", NetnsName, "addr", "add", HostIP + "/" + strconv.Itoa(PrefixLen), "dev", TapName},
		{"ip", "-n", NetnsName, "link", "set", TapName, "up"},
		{"ip", "-n", NetnsName, "route", "add", PodCIDR, "via", NodeIP, "dev", TapName, "onlink"},
		{"ip", "-n", NetnsName, "addr", "add", KubernetesServiceIP + "/32", "dev", "lo"},
	} {
		if b, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("node: %s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(b)))
		}
	}
	return nil
}

// SetServiceIPOnHost adds (on) or removes KubernetesServiceIP from the
// namespace's loopback: the lab's stand-in for a working kubernetes
// Service before any service proxy runs (see APIPort). Without it an
// in-cluster client that dials the ClusterIP waits for a proxy.
func SetServiceIPOnHost(on bool) error {
	op := "del"
	if on {
		op = "add"
	}
	argv := []string{"ip", "-n", NetnsName, "addr", op, KubernetesServiceIP + "/32", "dev", "lo"}
	if b, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("node: %s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(b)))
	}
	return nil
}

// deleteNetns kills what still runs in the namespace (only the node's
// processes live there) and deletes it.
func deleteNetns() {
	if _, err := os.Stat(netnsPath); err != nil {
		return
	}
	out, _ := exec.Command("ip", "netns", "pids", NetnsName).Output()
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
			p := proc{PID: pid}
			if p.Start, err = startTime(pid); err == nil {
				p.stop(5 * time.Second)
			}
		}
	}
	_ = exec.Command("ip", "netns", "del", NetnsName).Run()
}

// PodHTTP makes one HTTP GET from the host namespace to a pod address and
// returns the body (the route to PodCIDR goes via the node).
func (n *Node) PodHTTP(ctx context.Context, addr, path string) (string, error) {
	port, err := netns.NextSourcePort()
	if err != nil {
		return "", err
	}
	var body string
	err = n.ns.Do(func() error {
		ap, err := netip.ParseAddrPort(addr)
		if err != nil {
			return fmt.Errorf("node: pod address: %w", err)
		}
		body, err = netns.HTTPGet(ctx, port, ap, path, 30*time.Second)
		return err
	})
	return body, err
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func hashBytes(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
