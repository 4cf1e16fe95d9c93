package node

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
// host's own network. TapName, NodeIP, NodeMAC, NodeName and PodCIDR are
// the first guest's (Guest has every guest's).
const (
	NetnsName  = "switchyard-node"
	BridgeName = "synodebr"      // the guests' taps are its ports
	HostIP     = "192.168.100.1" // the bridge, where the API server listens
	TapName    = "synode0"
	NodeIP     = "192.168.100.2" // the guest's NIC, the Node's InternalIP
	PrefixLen  = 24
	NodeMAC    = "52:54:00:53:59:02"
	NodeName   = "node1"
	// APIPort is 443 and the namespace also holds KubernetesServiceIP, so
	// that in-cluster clients (a service proxy's DaemonSet among them)
	// reach the API server at the kubernetes Service's ClusterIP before any
	// service proxy runs: the guest routes it to the host, which answers
	// it as its own address, with no NAT. Once a proxy programs the
	// Service, the guest's own dataplane takes that traffic.
	APIPort             = 443
	PodCIDR             = "10.244.0.0/24"
	ClusterPodCIDR      = "10.244.0.0/16" // every guest's PodCIDR
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
	// Images are docker archives imported besides EnsureImages' (make
	// image's bin/image/switchyard.tar), by reference.
	Images []Image
	// Guests is how many nodes (VMs) to run: default 1, at most
	// MaxGuests. Each has its own disk, imports the images on its first
	// boot, and costs a TCG guest's memory and CPU again.
	Guests int
	// MemoryMB and CPUs size each guest: default 2048 and 2 for a lone
	// guest, 1 CPU each for more. Two 2-CPU guests on this 2-core host
	// (four TCG vCPU threads) booted together locked one up: both vCPUs of
	// node1 in kubelet threads, "soft lockup - CPU#0 stuck for 223s",
	// its agent silent, while node2 imported its images (2026-12-07).
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
	// Guests are the nodes' VMs, the first one's first.
	Guests []*Guest
	// Timings of Up, for reports (boot times from the first guest's
	// start; the stages are the first guest's).
	Timings Timings

	ns *netns.Unnamed
}

// Timings are what Up measured.
type Timings struct {
	ControlPlane time.Duration // namespace and control plane up to /readyz
	BootToReady  time.Duration // qemu start to every Node Ready
	BootToImages time.Duration // qemu start to the images imported on every guest
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
	if o.Guests < 1 || o.Guests > MaxGuests {
		return nil, fmt.Errorf("node: %d guests, want 1 to %d", o.Guests, MaxGuests)
	}
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
	guests := guestsAt(o.Dir, o.Guests)
	disks := make([]string, len(guests))
	for i, g := range guests {
		if disks[i], err = ensureDisk(cache, o.Rootfs, g); err != nil {
			return nil, err
		}
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
	for _, g := range guests {
		if err := os.MkdirAll(g.share(), 0o755); err != nil {
			return nil, fmt.Errorf("node: %w", err)
		}
	}
	if err := writePKI(o.Dir, guests); err != nil {
		return nil, err
	}
	for _, g := range guests {
		if err := writeShare(g, guests, o.KubeBin, images); err != nil {
			return nil, err
		}
	}
	for name, data := range map[string]string{"kube-bin": o.KubeBin, guestCountFile: strconv.Itoa(len(guests))} {
		if err := os.WriteFile(filepath.Join(o.Dir, name), []byte(data), 0o644); err != nil {
			return nil, fmt.Errorf("node: %w", err)
		}
	}
	defer func() {
		if err != nil {
			for _, g := range guests {
				err = fmt.Errorf("%w\n%s console (last lines):\n%s", err, g.Name, tail(g.console(), 30))
			}
			_ = Down(context.Background(), o.Dir)
		}
	}()

	began := time.Now()
	if err := createNetns(guests); err != nil {
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

	// One guest after the other, each once the one before is Ready:
	// two booted at once is when one locked up (Options.CPUs).
	booted := time.Now()
	for i, g := range guests {
		if _, err := startProc(o.Dir, g.qemuName(), qemuArgv(o, g, assets.Vmlinux, initrd, disks[i]), os.Environ()); err != nil {
			return nil, err
		}
		log.Info("guest booting", "node", g.Name, "disk", disks[i])
		if err := poll(ctx, "Node "+g.Name+" Ready", func() error { return n.guestReady(ctx, g) }, n.checkGuest); err != nil {
			return nil, err
		}
		log.Info("Node Ready", "node", g.Name, "elapsed", time.Since(booted).Round(time.Millisecond))
	}
	n.Timings.BootToReady = time.Since(booted)
	log.Info("nodes Ready", "nodes", len(guests), "elapsed", n.Timings.BootToReady.Round(time.Millisecond))
	if err := poll(ctx, "the images imported", func() error {
		for _, g := range guests {
			if err := g.imported(); err != nil {
				return err
			}
		}
		return nil
	}, n.checkGuest); err != nil {
		return nil, err
	}
	n.Timings.BootToImages = time.Since(booted)
	first := guests[0]
	n.Timings.GuestInit, _ = first.mark("init")
	n.Timings.GuestContainerd, _ = first.mark("containerd")
	n.Timings.GuestKubelet, _ = first.mark("kubelet")
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
	if o.Guests == 0 {
		o.Guests = 1
	}
	if o.MemoryMB == 0 {
		o.MemoryMB = 2048
	}
	if o.CPUs == 0 {
		o.CPUs = 2
		if o.Guests > 1 {
			o.CPUs = 1
		}
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
	n := &Node{Dir: dir, Kubeconfig: adminKubeconfig(dir), KubeBin: string(kubeBin),
		Guests: guestsAt(dir, readGuestCount(dir)), ns: ns}
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

// Ready says whether every guest's Node is Ready now: nil, or why not. A
// command that Opens a node checks it is really up with it.
func (n *Node) Ready(ctx context.Context) error {
	for _, g := range n.Guests {
		if err := n.guestReady(ctx, g); err != nil {
			return err
		}
	}
	return nil
}

// guestReady is nil when g's Node is Ready, or why not.
func (n *Node) guestReady(ctx context.Context, g *Guest) error {
	node, err := n.Client.CoreV1().Nodes().Get(ctx, g.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status == corev1.ConditionTrue {
				return nil
			}
			return fmt.Errorf("Node %s: condition Ready is %s: %s", g.Name, c.Status, c.Message)
		}
	}
	return fmt.Errorf("Node %s: no Ready condition yet", g.Name)
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

// checkGuest is checkProcs, the guests' qemu included, plus their boots'
// own failures.
func (n *Node) checkGuest() error {
	if err := n.checkProcs(); err != nil {
		return err
	}
	for _, g := range n.Guests {
		if err := g.bootFailed(); err != nil {
			return err
		}
	}
	return nil
}

// Exec runs script in the first guest (Guest.Exec).
func (n *Node) Exec(ctx context.Context, script string) (string, error) {
	return n.Guests[0].Exec(ctx, script)
}

// PutFile writes data as name to every guest's share and returns its path
// in the guests (Guest.PutFile).
func (n *Node) PutFile(name string, data []byte, mode os.FileMode) (string, error) {
	var path string
	for _, g := range n.Guests {
		var err error
		if path, err = g.PutFile(name, data, mode); err != nil {
			return "", err
		}
	}
	return path, nil
}

// Import imports img on every guest (Guest.Import), as a DaemonSet's
// image must be on each node.
func (n *Node) Import(ctx context.Context, img Image) error {
	for _, g := range n.Guests {
		if err := g.Import(ctx, img); err != nil {
			return err
		}
	}
	return nil
}

// Down stops the node whose state is in dir: the guests are asked to
// sync and power off (their disks are kept), then every recorded process
// is stopped and the namespace deleted. It succeeds when nothing runs.
func Down(ctx context.Context, dir string) error {
	procs := readProcs(dir)
	var wg sync.WaitGroup
	for _, g := range guestsAt(dir, readGuestCount(dir)) {
		i := slices.IndexFunc(procs, func(p proc) bool { return p.Name == g.qemuName() })
		if i < 0 {
			continue
		}
		p := procs[i]
		wg.Go(func() {
			ectx, cancel := context.WithTimeout(ctx, 30*time.Second)
			_, _ = g.Exec(ectx, "sync; (sleep 1; busybox poweroff -f) >/dev/null 2>&1 &")
			cancel()
			deadline := time.Now().Add(60 * time.Second)
			for p.alive() && time.Now().Before(deadline) {
				time.Sleep(200 * time.Millisecond)
			}
			p.stop(10 * time.Second)
		})
	}
	wg.Wait()
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
// it, see APIPort), the bridge with HostIP, each guest's tap a port of it,
// and a route to each guest's pod network via the guest. A namespace left
// by a node that is no longer running is replaced.
func createNetns(guests []*Guest) error {
	deleteNetns()
	argvs := [][]string{
		{"ip", "netns", "add", NetnsName},
		{"ip", "-n", NetnsName, "link", "set", "lo", "up"},
		{"ip", "-n", NetnsName, "link", "add", BridgeName, "type", "bridge"},
		{"ip", "-n", NetnsName, "addr", "add", HostIP + "/" + strconv.Itoa(PrefixLen), "dev", BridgeName},
		{"ip", "-n", NetnsName, "link", "set", BridgeName, "up"},
	}
	for _, g := range guests {
		argvs = append(argvs,
			[]string{"ip", "-n", NetnsName, "tuntap", "add", "dev", g.Tap, "mode", "tap"},
			[]string{"ip", "-n", NetnsName, "link", "set", g.Tap, "master", BridgeName, "up"},
			[]string{"ip", "-n", NetnsName, "route", "add", g.PodCIDR, "via", g.IP, "dev", BridgeName, "onlink"})
	}
	argvs = append(argvs, []string{"ip", "-n", NetnsName, "addr", "add", KubernetesServiceIP + "/32", "dev", "lo"})
	for _, argv := range argvs {
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
// returns the body (the route to each pod CIDR goes via its guest).
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
