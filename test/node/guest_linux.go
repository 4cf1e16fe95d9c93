package node

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-lb/switchyard/test/lab"
)

var (
	//go:embed guest/boot.sh
	bootScript string
	//go:embed guest/init.sh
	initScript string
)

// bootModules are what the initramfs loads to reach the disk and the
// share; the rest come from the disk's own /lib/modules.
var bootModules = []string{
	"crc32c_generic", "virtio_pci", "virtio_blk", "ext4", "9pnet_virtio", "9p",
}

// nodeModules are what guest/init.sh loads from the disk: the NIC, the
// CNI bridge, overlayfs for containerd, and what a service proxy uses
// (the kernel loads the rest on demand through the disk's modprobe).
var nodeModules = []string{
	"virtio_net", "overlay", "br_netfilter", "bridge", "veth", "dummy",
	"nf_conntrack", "nf_nat", "ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh",
	"nf_tables", "nft_ct", "nft_nat", "nft_chain_nat", "nft_masq", "nft_compat",
	"xt_conntrack", "xt_MASQUERADE", "xt_mark", "xt_comment", "xt_addrtype",
	"ip_set", "sctp",
}

// writeBootInitramfs writes the initramfs for kernel k, once per content,
// under cacheDir and returns its path.
func writeBootInitramfs(cacheDir string, k lab.Kernel, busybox string) (string, error) {
	var buf bytes.Buffer
	if err := lab.WriteInitramfs(&buf, k, busybox, bootModules, bootScript); err != nil {
		return "", fmt.Errorf("node: initramfs: %w", err)
	}
	sum := hashBytes(buf.Bytes())
	path := filepath.Join(cacheDir, "boot-"+k.Version+"-"+sum[:12]+".cpio")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := os.WriteFile(path+".tmp", buf.Bytes(), 0o644); err != nil {
		return "", fmt.Errorf("node: %w", err)
	}
	return path, os.Rename(path+".tmp", path)
}

// diskGrowth is what the node's disk gets beyond the rootfs image (a
// sparse file; guest/init.sh grows the file system into it): room for
// the images (agnhost alone is 200 MB unpacked), every switchyard:dev
// imported, and the e2e pods. With rootfs.sh's 1 GiB alone the kubelet
// hit disk pressure and its eviction manager deleted the imported
// agnhost and pause images (seen), which no registry can bring back.
const diskGrowth = 4 << 30

// ensureDisk returns guest g's disk: a copy of rootfs made once per
// rootfs image and guest and kept, so that images imported stay
// imported, grown by diskGrowth (a disk made before is grown too).
func ensureDisk(cacheDir, rootfs string, g *Guest) (string, error) {
	key := filepath.Base(filepath.Dir(rootfs)) // rootfs-HASH
	if g.Index > 0 {
		key += "-" + g.Name
	}
	disk := filepath.Join(cacheDir, "disk-"+key+".ext4")
	if _, err := os.Stat(disk); err != nil {
		cmd := exec.Command("cp", "--sparse=always", rootfs, disk+".tmp")
		if b, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("node: copy the rootfs: %w: %s", err, b)
		}
		if err := os.Rename(disk+".tmp", disk); err != nil {
			return "", fmt.Errorf("node: %w", err)
		}
	}
	src, err := os.Stat(rootfs)
	if err != nil {
		return "", fmt.Errorf("node: %w", err)
	}
	cur, err := os.Stat(disk)
	if err != nil {
		return "", fmt.Errorf("node: %w", err)
	}
	if want := src.Size() + diskGrowth; cur.Size() < want {
		if err := os.Truncate(disk, want); err != nil {
			return "", fmt.Errorf("node: grow the disk: %w", err)
		}
	}
	return disk, nil
}

// containerdConfig is the guest's /etc/containerd/config.toml: CRI with
// runc, cgroupfs (the kubelet's driver), the Debian CNI plugin directory
// and the pause image imported, never pulled.
const containerdConfig = `version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "` + PauseImage + `"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "/etc/cni/net.d"
`

// cniConfig is a guest's pod network: the bridge cni0, host-local IPAM
// on its pod CIDR, hairpin on (a pod reaching itself through a Service),
// no masquerade (the host and the other guests route each pod CIDR to
// its guest), and portmap for hostPort (KubeProxy's CLOSE_WAIT spec
// serves on one: without it the client's connection to the other node
// never opened and the spec found no conntrack entry).
func cniConfig(podCIDR string) string {
	return `{
  "cniVersion": "1.0.0",
  "name": "lab",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "` + podCIDR + `"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`
}

// kubeletConfig: cgroup v2 with the cgroupfs driver (containerd 1.6 has no
// RuntimeConfig RPC), anonymous access for the API server's exec, logs
// and port-forward (a lab), no swap check, eviction and image GC
// thresholds that never remove the imported images.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
cgroupDriver: cgroupfs
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
clusterDomain: cluster.local
clusterDNS: [` + ClusterDNSIP + `]
failSwapOn: false
resolvConf: /etc/resolv.conf
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 50Mi
  nodefs.available: 1%
  imagefs.available: 1%
  nodefs.inodesFree: 1%
serializeImagePulls: false
`

// writeShare fills guest g's 9p share: the init script, its settings
// (its names and addresses, the routes to the other guests' pods), the
// configurations, the kubelet and the images (copies).
func writeShare(g *Guest, all []*Guest, kubeBin string, images []Image) error {
	share := g.share()
	for _, d := range []string{"bin", "images", "agent", "state"} {
		if err := os.MkdirAll(filepath.Join(share, d), 0o755); err != nil {
			return fmt.Errorf("node: %w", err)
		}
	}
	var first, rest []string
	for _, img := range images {
		n, err := img.importName()
		if err != nil {
			return err
		}
		if err := copyFile(img.Path, filepath.Join(share, "images", n+".tar")); err != nil {
			return err
		}
		// NAME=REF: guest/init.sh imports NAME again when REF is gone
		// from containerd.
		if img.Ref == PauseImage {
			first = append(first, n+"="+img.Ref)
		} else {
			rest = append(rest, n+"="+img.Ref)
		}
	}
	env := fmt.Sprintf("NODE_NAME=%s\nNODE_IP=%s\nNODE_MAC=%s\nHOST_IP=%s\nPREFIX_LEN=%d\nROUTES=%q\nMODULES=%q\nFIRST_IMAGES=%q\nIMAGES=%q\n",
		g.Name, g.IP, g.MAC, HostIP, PrefixLen, strings.Join(g.routes(all), " "),
		strings.Join(nodeModules, " "), strings.Join(first, " "), strings.Join(rest, " "))
	files := map[string]string{
		"init.sh":         initScript,
		"node.env":        env,
		"containerd.toml": containerdConfig,
		"cni.conflist":    cniConfig(g.PodCIDR),
		"kubelet.yaml":    kubeletConfig,
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(share, name), []byte(data), 0o644); err != nil {
			return fmt.Errorf("node: %w", err)
		}
	}
	return copyFile(filepath.Join(kubeBin, kubeletBin), filepath.Join(share, "bin", kubeletBin))
}

// copyFile copies src to dst. Not a hard link: the guest is root on the
// share and must not be able to change the cached kubelet or images.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("node: copy %s: %w", src, err)
	}
	return out.Close()
}

// qemuArgv boots guest g: vmlinux with the initramfs, the disk as
// virtio-blk, its tap as a virtio NIC and its share as 9p. -smp 2 with
// multi-threaded TCG: a node runs many processes at once (kubelet-lab.md).
func qemuArgv(o Options, g *Guest, vmlinux, initrd, disk string) []string {
	return []string{
		"qemu-system-x86_64",
		"-accel", "tcg,thread=multi", "-cpu", "max",
		"-smp", strconv.Itoa(o.CPUs), "-m", strconv.Itoa(o.MemoryMB),
		"-kernel", vmlinux, "-initrd", initrd,
		"-append", "console=ttyS0 panic=-1 quiet loglevel=3 no_timer_check",
		"-drive", "file=" + disk + ",format=raw,if=virtio,cache=writeback",
		"-netdev", "tap,id=n0,ifname=" + g.Tap + ",script=no,downscript=no",
		"-device", "virtio-net-pci,netdev=n0,mac=" + g.MAC,
		"-virtfs", "local,path=" + g.share() + ",mount_tag=host,security_model=none,id=host",
		"-display", "none", "-vga", "none", "-nodefaults", "-no-user-config",
		"-no-reboot", "-monitor", "none",
		"-serial", "file:" + g.console(),
	}
}

func tail(path string, lines int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	ls := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}

// poll calls try every pollInterval until it succeeds, check fails or ctx
// ends.
func poll(ctx context.Context, what string, try func() error, check func() error) error {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	var last error
	for {
		if last = try(); last == nil {
			return nil
		}
		if check != nil {
			if err := check(); err != nil {
				return fmt.Errorf("node: waiting for %s: %w", what, err)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node: waiting for %s: %w (last: %w)", what, ctx.Err(), last)
		case <-t.C:
		}
	}
}

const pollInterval = 250 * time.Millisecond

var errGone = errors.New("exited")
