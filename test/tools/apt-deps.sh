#!/usr/bin/env bash
# apt-deps.sh installs the Debian packages named that are not installed,
# with apt-get, and says on stderr what it installs. A warm machine runs
# no apt command at all. The suites' make targets and the node scripts
# share it.
#
# Usage: test/tools/apt-deps.sh NAME WITHOUT_ROOT PACKAGE...
#   NAME          prefixes its messages (peers, cluster, node);
#   WITHOUT_ROOT  what to do when something is missing and this is not
#                 root: skip (say so and exit 0: the suite's tests skip
#                 themselves), fail (say so and exit 1), or sudo (install
#                 through sudo).
set -euo pipefail

if [ $# -lt 3 ]; then
	echo "usage: $0 NAME skip|fail|sudo PACKAGE..." >&2
	exit 2
fi
name=$1 without_root=$2
shift 2
case "$without_root" in
skip | fail | sudo) ;;
*) echo "$0: WITHOUT_ROOT is skip, fail or sudo, not $without_root" >&2; exit 2 ;;
esac

missing=()
for p in "$@"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
[ ${#missing[@]} -gt 0 ] || exit 0

sudo=""
if [ "$(id -u)" != 0 ]; then
	case "$without_root" in
	skip) echo "$name: not root, cannot install: ${missing[*]} (the tests that need it skip)" >&2; exit 0 ;;
	fail) echo "$name: not root, cannot install: ${missing[*]}" >&2; exit 1 ;;
	sudo) sudo=sudo ;;
	esac
fi
echo "$name: installing ${missing[*]}" >&2
$sudo env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 update -qq
$sudo env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
