# lib.sh: what rootfs.sh and userland.sh share, sourced by both (after
# they set $cache and define log).

# reuse_or_lock MARKER RESULT prints RESULT and ends the script when
# MARKER exists (built before, with the same content hash); otherwise it
# takes the node cache's lock, so that concurrent callers wait for one
# build, and looks again once it holds it.
reuse_or_lock() {
	if [ -f "$1" ]; then
		echo "$2"
		exit 0
	fi
	exec 9>"$cache/.lock"
	flock 9
	if [ -f "$1" ]; then
		echo "$2"
		exit 0
	fi
}

# apt-get and mmdebstrap need root; elsewhere sudo stands in.
sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo

# need_mmdebstrap installs mmdebstrap with apt when it is missing.
need_mmdebstrap() {
	"$(dirname "${BASH_SOURCE[0]}")/../tools/apt-deps.sh" "$1" sudo mmdebstrap
}
