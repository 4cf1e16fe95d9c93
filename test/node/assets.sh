#!/usr/bin/env bash
# Builds, once (each step is cached), what a node needs on this host and
# prints it as shell assignments for the make targets to eval:
#
#   bin=KUBE_BIN_DIR rootfs=EXT4_IMAGE userland=TAR
#
# The root filesystem and agnhost's userland (rootfs.sh, userland.sh:
# mmdebstrap, mostly downloads and dpkg) are built in the background
# while test/tools/kube-binaries.sh compiles (CPU-bound), so that on a
# cold machine the two overlap instead of adding up. Warm, every step
# only finds its cache.
#
# Usage: eval "$(test/node/assets.sh [kube-binaries.sh flags])"
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

("$here/rootfs.sh" >"$tmp/rootfs" && "$here/userland.sh" >"$tmp/userland") &
fs=$!
# On a failed compile the filesystem build still ends (it holds the node
# cache's lock; a killed mmdebstrap would leave its tree to the next run).
if ! bin=$("$here/../tools/kube-binaries.sh" "$@"); then
	wait "$fs" || true
	exit 1
fi
if ! wait "$fs"; then
	echo "node assets: the root filesystem or the userland failed (above)" >&2
	exit 1
fi
printf 'bin=%q rootfs=%q userland=%q\n' "$bin" "$(cat "$tmp/rootfs")" "$(cat "$tmp/userland")"
