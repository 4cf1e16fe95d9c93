#!/usr/bin/env bash
# deps.sh installs what the kernel lab needs when it is missing, and prints
# the directory of the unpacked guest kernel package on stdout.
#
#   - qemu-system-x86, busybox-static and xz-utils through apt-get;
#   - Debian's kernel (the package linux-image-amd64 points at) is not
#     installed on the host: its .deb is downloaded and unpacked into the
#     cache with dpkg-deb. That skips the host's update-initramfs and any
#     bootloader hooks, and is faster than an install (kernel-lab.md).
#   - with --netfilter-tools, also Debian's iptables (nft backend), ipset and
#     nftables, which the guest gets through `labrun -extra` (kube-proxy's
#     IPVS mode runs ipset and iptables-restore, its nftables mode and the
#     demo run nft).
#
# Everything is idempotent: a warm machine runs no apt command at all.
set -euo pipefail

netfilter=0
case "${1:-}" in
"") ;;
--netfilter-tools) netfilter=1 ;;
*) echo "usage: $0 [--netfilter-tools]" >&2; exit 2 ;;
esac

cache=${SWITCHYARD_CACHE:-$HOME/.cache/switchyard}/lab
mkdir -p "$cache"
log="$cache/deps.log"
: >"$log"

# quiet runs a command with its output in $log, shown only when it fails.
quiet() {
	if ! "$@" >>"$log" 2>&1; then
		echo "lab: failed: $*" >&2
		tail -n 30 "$log" >&2
		return 1
	fi
}

# apt-get update and install need root; elsewhere sudo stands in.
sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo

updated=0
apt_update() {
	if [ "$updated" = 0 ]; then
		echo "lab: apt-get update" >&2
		quiet $sudo apt-get update
		updated=1
	fi
}

missing=()
command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q 'ok installed' || missing+=(busybox-static)
command -v xz >/dev/null || missing+=(xz-utils)
if [ "$netfilter" = 1 ]; then
	[ -x /usr/sbin/xtables-nft-multi ] || missing+=(iptables)
	[ -x /usr/sbin/ipset ] || missing+=(ipset)
	[ -x /usr/sbin/nft ] || missing+=(nftables)
fi
if [ ${#missing[@]} -gt 0 ]; then
	apt_update
	echo "lab: apt-get install ${missing[*]}" >&2
	quiet $sudo env DEBIAN_FRONTEND=noninteractive INITRD=No apt-get install -y --no-install-recommends "${missing[@]}"
fi

# The versioned image package behind the linux-image-amd64 metapackage.
resolve_kernel() {
	apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}'
}

# A kernel already unpacked (the newest complete one, as labrun picks it) is
# reused without asking apt anything, so a warm run works offline.
kdir=$(ls -td "$cache"/kernel/*/.complete 2>/dev/null | head -n1 || true)
kdir=${kdir%.complete}
if [ -z "$kdir" ]; then
	pkg=$(resolve_kernel)
	if [ -z "$pkg" ]; then
		apt_update
		pkg=$(resolve_kernel)
	fi
	[ -n "$pkg" ] || { echo "lab: cannot resolve linux-image-amd64" >&2; exit 1; }
	dl="$cache/deb"
	mkdir -p "$dl"
	if ! ls "$dl/${pkg}"_*.deb >/dev/null 2>&1; then
		echo "lab: apt-get download $pkg" >&2
		# apt-get download writes into the working directory; as root apt may
		# warn that it downloads unsandboxed, which is harmless here.
		if ! (cd "$dl" && apt-get download "$pkg" >>"$log" 2>&1); then
			# The package lists may be older than the mirror, which may
			# have moved on to a new kernel ABI: refresh and resolve again.
			apt_update
			pkg=$(resolve_kernel)
			[ -n "$pkg" ] || { echo "lab: cannot resolve linux-image-amd64" >&2; exit 1; }
			(cd "$dl" && quiet apt-get download "$pkg")
		fi
	fi
	deb=$(ls "$dl/${pkg}"_*.deb | sort -V | tail -n1)
	kdir="$cache/kernel/$pkg/"
	rm -rf "$kdir"
	mkdir -p "$kdir"
	echo "lab: unpacking $(basename "$deb")" >&2
	quiet dpkg-deb -x "$deb" "$kdir"
	touch "$kdir/.complete"
	rm -f "$deb" # 70 MB; the unpacked tree is what labrun reads
fi
echo "${kdir%/}"
