#!/usr/bin/env bash
# Builds etcd, kube-apiserver and kubectl at pinned versions from the Go module
# proxy, once, into a cache directory, and prints that directory.
#
# k8s.io/kubernetes and etcd use replace directives, so `go install m@v` is
# refused; instead a throwaway module in the cache requires them and replaces
# each staging module by its published version (shared/notes/apiserver.md).
#
# Usage: test/tools/kube-binaries.sh               -> prints the bin directory on stdout.
#        test/tools/kube-binaries.sh --kube-proxy  -> also builds kube-proxy (static,
#                                                     CGO_ENABLED=0) for make bench-kubeproxy.
#        test/tools/kube-binaries.sh --kubelet     -> also builds the kubelet (static; for a
#                                                     real node in the qemu guest: a few
#                                                     minutes and 1.5 GB of memory, once).
#        test/tools/kube-binaries.sh --control-plane -> also builds kube-controller-manager
#                                                     and kube-scheduler (a real node's
#                                                     control plane, test/node).
#        test/tools/kube-binaries.sh --agnhost -> also builds agnhost, the e2e test image's
#                                                     program (k8s.io/kubernetes/test/images/agnhost,
#                                                     static; test/node makes its image), and
#                                                     regression-issue-74839 (the program of the
#                                                     Conntrack invalid-state spec's image).
#        test/tools/kube-binaries.sh --e2e  -> also builds upstream's e2e.test (`go test -c
#                                                     k8s.io/kubernetes/test/e2e`, static, vet off;
#                                                     6 minutes at load 17 to 40 at load 18-50, and
#                                                     2.2 GB of memory, once; make conformance runs it).
#        test/tools/kube-binaries.sh --coredns -> also builds CoreDNS (CoreDNS's own module,
#                                                     static; test/node makes its image so
#                                                     that Service names resolve in pods).
# The flags combine.
set -euo pipefail

with_proxy=0 with_kubelet=0 with_cp=0 with_agnhost=0 with_e2e=0 with_coredns=0
for arg in "$@"; do
	case "$arg" in
	--kube-proxy) with_proxy=1 ;;
	--kubelet) with_kubelet=1 ;;
	--control-plane) with_cp=1 ;;
	--agnhost) with_agnhost=1 ;;
	--e2e) with_e2e=1 ;;
	--coredns) with_coredns=1 ;;
	*) echo "usage: $0 [--kube-proxy] [--kubelet] [--control-plane] [--agnhost] [--e2e] [--coredns]" >&2; exit 2 ;;
	esac
done

KUBE_VERSION=${KUBE_VERSION:-v1.36.3}
# The CoreDNS kubeadm v1.36 pins.
COREDNS_VERSION=${COREDNS_VERSION:-v1.14.2}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
STAGING_VERSION=v0${KUBE_VERSION#v1}

cache=${SWITCHYARD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/switchyard}
bin=$cache/kube/$KUBE_VERSION-etcd-$ETCD_VERSION/bin
mkdir -p "$bin"
log() { echo "kube-binaries: $*" >&2; }

# One build at a time per cache (make demo and make test may start
# together): the second waits, then finds the binaries built.
if command -v flock >/dev/null; then
	exec 9>"$cache/kube/.lock"
	flock 9
fi

# kube_ldflags: the link flags of every k8s.io/kubernetes binary: stripped,
# with the version the binaries report.
kube_ldflags() {
	local ld="-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${KUBE_VERSION#v1.}"
	echo "${ld%.*}"
}

# KUBE_TAGS: every k8s.io/kubernetes binary is built with upstream's release
# tag (hack/lib/golang.sh): gRPC without golang.org/x/net/trace. One tag set
# for all of them also lets the Go build cache share every package between
# kube-apiserver (make test) and the node's binaries; with differing tags the
# ~240 packages that import gRPC were compiled twice.
KUBE_TAGS=grpcnotrace

# mkmod DIR MODULE VERSION: a throwaway module in DIR requiring MODULE@VERSION
# with every relative replace of MODULE's go.mod pointed at the published
# module of the same name at STAGING (or MODULE's own VERSION for etcd).
mkmod() {
	local dir=$1 mod=$2 ver=$3 stag=$4
	rm -rf "$dir"; mkdir -p "$dir"
	local gomod
	gomod=$(cd "$dir" && GOFLAGS=-mod=mod go mod download -json "$mod@$ver" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
	{
		echo "module switchyard.local/kubebuild"
		echo "go 1.26"
		echo "require $mod $ver"
		grep -E '^\s*(replace\s+)?[^ ]+ => \.\.?/' "$gomod" | grep -v FORBIDDEN | sed 's/^\s*replace\s*//' | awk -v v="$stag" '{print "replace " $1 " => " $1 " " v}'
	} >"$dir/go.mod"
}

build_kube() {
	local dir=$cache/kube/build-$KUBE_VERSION
	mkmod "$dir" k8s.io/kubernetes "$KUBE_VERSION" "$STAGING_VERSION"
	cat >"$dir/tools.go" <<'GO'
//go:build tools

package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
GO
	mkdir -p "$dir/kubectl"
	cat >"$dir/kubectl/main.go" <<'GO'
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
)

func main() { os.Exit(cli.Run(cmd.NewDefaultKubectlCommand())) }
GO
	local ld
	ld=$(kube_ldflags)
	(cd "$dir" && go mod tidy -e >/dev/null 2>&1 || true
	 cd "$dir" && GOFLAGS=-mod=mod go get k8s.io/kubernetes/cmd/kube-apiserver@"$KUBE_VERSION" k8s.io/kubectl/pkg/cmd@"$STAGING_VERSION" k8s.io/component-base/cli@"$STAGING_VERSION" >/dev/null
	 if [ ! -x "$bin/kube-apiserver" ]; then
		log "building kube-apiserver $KUBE_VERSION (several minutes, once)"
		SECONDS=0
		CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -tags "$KUBE_TAGS" -ldflags "$ld" -o "$bin/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver
		"$bin/kube-apiserver.tmp" --version >/dev/null
		mv "$bin/kube-apiserver.tmp" "$bin/kube-apiserver"
		log "kube-apiserver built in ${SECONDS}s"
	 fi
	 if [ ! -x "$bin/kubectl" ]; then
		log "building kubectl $KUBE_VERSION"
		SECONDS=0
		CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -tags "$KUBE_TAGS" -ldflags "$ld" -o "$bin/kubectl.tmp" ./kubectl
		"$bin/kubectl.tmp" version --client >/dev/null
		mv "$bin/kubectl.tmp" "$bin/kubectl"
		log "kubectl built in ${SECONDS}s"
	 fi)
}

build_etcd() {
	local dir=$cache/kube/build-etcd-$ETCD_VERSION
	mkmod "$dir" go.etcd.io/etcd/server/v3 "$ETCD_VERSION" "$ETCD_VERSION"
	(cd "$dir" && cat >tools.go <<'GO'
//go:build tools

package tools

import _ "go.etcd.io/etcd/server/v3"
GO
	 GOFLAGS=-mod=mod go get go.etcd.io/etcd/server/v3@"$ETCD_VERSION" >/dev/null
	 log "building etcd $ETCD_VERSION (a minute or two, once)"
	 SECONDS=0
	 CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$bin/etcd.tmp" go.etcd.io/etcd/server/v3
	 "$bin/etcd.tmp" --version >/dev/null
	 mv "$bin/etcd.tmp" "$bin/etcd"
	 log "etcd built in ${SECONDS}s")
}

# build_coredns: CoreDNS with the plugins of the lab's Corefile only
# (test/node/coredns.yaml; `prometheus` is plugin/metrics), as CoreDNS's
# own custom builds do: a main that imports coremain and the plugins
# (upstream's coredns.go imports core/plugin, all ~55 of them). 760
# packages to compile instead of 1,335. A directive added to the Corefile
# needs its plugin here: TestCoreDNSPlugins (test/node) checks.
build_coredns() {
	local dir=$cache/kube/build-coredns-$COREDNS_VERSION
	rm -rf "$dir"; mkdir -p "$dir"
	cat >"$dir/main.go" <<'GO'
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() { coremain.Run() }
GO
	printf 'module switchyard.local/coredns\n\ngo 1.26\n' >"$dir/go.mod"
	(cd "$dir" && GOFLAGS=-mod=mod go get github.com/coredns/coredns@"$COREDNS_VERSION" >/dev/null
	 log "building coredns $COREDNS_VERSION (a few minutes, once)"
	 SECONDS=0
	 CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$bin/coredns.tmp" .
	 "$bin/coredns.tmp" -version >/dev/null
	 mv "$bin/coredns.tmp" "$bin/coredns"
	 log "coredns built in ${SECONDS}s")
}

# build_cmd NAME [PACKAGE [test|nohelp]]: k8s.io/kubernetes/cmd/NAME (or
# PACKAGE of k8s.io/kubernetes; with "test", PACKAGE's test binary, go test
# -c) from its own throwaway module (same replaces as kube-apiserver),
# statically linked so that it runs in the kernel lab's guest whatever its
# libc. The binary must answer --help, but with "nohelp" (a program with no
# flags, which would run).
build_cmd() {
	local cmd=$1 pkg=${2:-k8s.io/kubernetes/cmd/$1} gocmd=(build)
	# go test -c runs vet too, over every package the test imports (its
	# printf facts): for e2e.test, ~2,800 packages type-checked again after
	# compiling, for a binary used as a tool. Not wanted.
	[ "${3:-}" != test ] || gocmd=(test -c -vet=off)
	local dir=$cache/kube/build-$cmd-$KUBE_VERSION
	mkmod "$dir" k8s.io/kubernetes "$KUBE_VERSION" "$STAGING_VERSION"
	cat >"$dir/tools.go" <<GO
//go:build tools

package tools

import _ "$pkg"
GO
	local ld
	ld=$(kube_ldflags)
	(cd "$dir" && GOFLAGS=-mod=mod go get "$pkg"@"$KUBE_VERSION" >/dev/null
	 log "building $cmd $KUBE_VERSION (a few minutes, once)"
	 SECONDS=0
	 CGO_ENABLED=0 GOFLAGS=-mod=mod go "${gocmd[@]}" -trimpath -tags "$KUBE_TAGS" -ldflags "$ld" -o "$bin/$cmd.tmp" "$pkg"
	 [ "${3:-}" = nohelp ] || "$bin/$cmd.tmp" --help >/dev/null 2>&1
	 mv "$bin/$cmd.tmp" "$bin/$cmd"
	 log "$cmd built in ${SECONDS}s")
}

[ -x "$bin/etcd" ] || build_etcd
{ [ -x "$bin/kube-apiserver" ] && [ -x "$bin/kubectl" ]; } || build_kube
[ "$with_proxy" = 0 ] || [ -x "$bin/kube-proxy" ] || build_cmd kube-proxy
[ "$with_kubelet" = 0 ] || [ -x "$bin/kubelet" ] || build_cmd kubelet
[ "$with_cp" = 0 ] || [ -x "$bin/kube-controller-manager" ] || build_cmd kube-controller-manager
[ "$with_cp" = 0 ] || [ -x "$bin/kube-scheduler" ] || build_cmd kube-scheduler
[ "$with_agnhost" = 0 ] || [ -x "$bin/agnhost" ] || build_cmd agnhost k8s.io/kubernetes/test/images/agnhost
[ "$with_agnhost" = 0 ] || [ -x "$bin/regression-issue-74839" ] ||
	build_cmd regression-issue-74839 k8s.io/kubernetes/test/images/regression-issue-74839 nohelp
[ "$with_e2e" = 0 ] || [ -x "$bin/e2e.test" ] || build_cmd e2e.test k8s.io/kubernetes/test/e2e test
[ "$with_coredns" = 0 ] || [ -x "$bin/coredns" ] || build_coredns
echo "$bin"
