#!/usr/bin/env bash
# Builds the userland of the node's agnhost image, once per content, and
# prints the path of its tar archive (one image layer).
#
# Upstream's agnhost image is alpine with bind-tools, curl,
# netcat-openbsd, iproute2, iperf, bash and util-linux-misc: e2e specs exec
# `curl -g -s --connect-timeout 2 ...`, `echo hostName | nc -v -t -w 2 ...`,
# `dig`/`nslookup`, `wget -T 5 -qO- ...` inside agnhost pods. This is the
# same set from Debian bookworm (mmdebstrap minbase, the tool rootfs.sh
# already uses), with upstream's in-image user and group, written by
# mmdebstrap as a tar (no root needed to read it back).
#
# Cached under $SWITCHYARD_CACHE/node/userland-HASH.tar, HASH covering this
# script and the package list; built under rootfs.sh's lock.
#
# Usage: test/node/userland.sh
set -euo pipefail

cache=${SWITCHYARD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/switchyard}/node
mkdir -p "$cache"
log() { echo "node userland: $*" >&2; }
# shellcheck source=test/node/lib.sh
. "$(cd "$(dirname "$0")" && pwd)/lib.sh"

suite=bookworm
packages=(
	bash curl netcat-openbsd bind9-dnsutils bind9-host iproute2 iperf wget iputils-ping
)

hash=$( { cat "$0"; echo "$suite ${packages[*]}"; } | sha256sum | cut -c1-16)
out=$cache/userland-$hash.tar
reuse_or_lock "$out" "$out"
need_mmdebstrap "node userland"

SECONDS=0
log "mmdebstrap $suite minbase with ${packages[*]} (a minute or more, once)"
include=$(IFS=,; echo "${packages[*]}")
# /usr merged by mmdebstrap's own hook rather than the usrmerge package,
# which brings perl (40 MB the import then spends minutes on under TCG);
# no Recommends either.
$sudo mmdebstrap --quiet --variant=minbase --include="$include" \
	--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
	--aptopt='APT::Install-Recommends "false"' \
	--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
	--dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
	--customize-hook='chroot "$1" groupadd -g 50000 group-defined-in-image' \
	--customize-hook='chroot "$1" useradd -u 1000 -m -G group-defined-in-image user-defined-in-image' \
	--customize-hook='mkdir -p "$1/uploads"' \
	--customize-hook='rm -rf "$1/var/cache/apt" "$1/var/lib/apt/lists" "$1/var/log"/*' \
	--skip=output/dev --format=tar \
	"$suite" "$out.tmp" >&2
$sudo chown "$(id -u):$(id -g)" "$out.tmp"
mv "$out.tmp" "$out"
log "userland written in ${SECONDS}s ($(( $(stat -c %s "$out") / 1048576 )) MB)"
echo "$out"
