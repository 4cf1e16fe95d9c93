#!/usr/bin/env bash
# Builds the root filesystem of a real Kubernetes node for the qemu lab's
# guest, once per content, and prints the path of its ext4 disk image.
#
# A Debian bookworm minbase (mmdebstrap) with containerd, runc, the CNI
# plugins and the netfilter/IPVS tools a kubelet and a service proxy use,
# plus the modules of the lab's guest kernel (test/lab/deps.sh unpacks it),
# written into an ext4 image with `mke2fs -d` (no loop mount, no root
# needed for that step). An ext4 disk rather than an initramfs because runc's
# pivot_root does not work on an initramfs root (shared/notes/kubelet-lab.md).
#
# Cached under $SWITCHYARD_CACHE/node/rootfs-HASH, HASH covering this
# script, the package list and the kernel release; built under a lock, so
# concurrent callers wait and then reuse it. Installs mmdebstrap with apt
# when it is missing.
#
# Usage: test/node/rootfs.sh [KERNEL_DIR]   (default: the output of test/lab/deps.sh)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${SWITCHYARD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/switchyard}/node
mkdir -p "$cache"
log() { echo "node rootfs: $*" >&2; }
# shellcheck source=test/node/lib.sh
. "$here/lib.sh"

suite=bookworm
packages=(
	containerd runc containernetworking-plugins
	conntrack iptables nftables ipset ipvsadm
	kmod iproute2 tini busybox-static ca-certificates
)
# Free space for containerd's image store and the pods, beyond the files.
spare_mb=1024

kdir=${1:-$("$here/../lab/deps.sh")}
krel=$(ls "$kdir/lib/modules" | sort -V | tail -n1)
[ -n "$krel" ] || { log "no kernel modules in $kdir/lib/modules"; exit 1; }

hash=$( { cat "$0"; echo "$suite ${packages[*]} $krel $spare_mb"; } | sha256sum | cut -c1-16)
out=$cache/rootfs-$hash
reuse_or_lock "$out/.complete" "$out/rootfs.ext4"
need_mmdebstrap "node rootfs"

$sudo rm -rf "$out"
mkdir -p "$out"
tree=$out/tree
SECONDS=0
log "mmdebstrap $suite minbase with ${packages[*]} (a minute or more, once)"
include=$(IFS=,; echo "${packages[*]}")
# The mirror and keyring are the host's apt sources (mmdebstrap's default).
$sudo mmdebstrap --quiet --variant=minbase --include="$include" \
	--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
	--dpkgopt='path-exclude=/usr/share/locale/*' \
	"$suite" "$tree" >&2
log "debootstrapped in ${SECONDS}s ($($sudo du -sm "$tree" | cut -f1) MB)"

# The guest kernel's modules, with their dependency index for modprobe.
# (The guest's own depmod, from kmod: the host need not have one.)
$sudo mkdir -p "$tree/lib/modules"
$sudo cp -a "$kdir/lib/modules/$krel" "$tree/lib/modules/"
$sudo chroot "$tree" depmod "$krel"
echo "$krel" | $sudo tee "$tree/etc/switchyard-node-kernel" >/dev/null

mb=$(( $($sudo du -sm "$tree" | cut -f1) * 5 / 4 + spare_mb ))
SECONDS=0
$sudo mke2fs -q -t ext4 -L switchyard-node -E root_owner=0:0 -d "$tree" "$out/rootfs.ext4.tmp" "${mb}M" >&2
mv "$out/rootfs.ext4.tmp" "$out/rootfs.ext4"
log "rootfs.ext4 ${mb} MB written in ${SECONDS}s"
$sudo rm -rf "$tree"
touch "$out/.complete"
echo "$out/rootfs.ext4"
