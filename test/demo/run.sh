#!/usr/bin/env bash
# make demo: a real etcd + kube-apiserver on loopback, sample Services and
# EndpointSlices, the daemon against them, and its plan printed like
# `ipvsadm -Ln`. Cleans up after itself.
#
#   run.sh                     dry run: the daemon on this host with the
#                              dry-run dataplane (this kernel has no IPVS)
#   run.sh --lab               the real daemon, statically built, inside the
#                              kernel lab's VM (test/lab) with the ipvs
#                              dataplane, reaching the API server through
#                              qemu user networking (guest 10.0.2.2 = host
#                              loopback); prints the kernel's IPVS table,
#                              switchyard0's addresses and the nft table
#                              (`nft list table inet switchyard` when the
#                              host has Debian's nft to lend the guest)
#   run.sh --lab-if-available  --lab after installing the lab's packages
#                              when missing, as make test does
#                              (test/lab/deps.sh --netfilter-tools: qemu,
#                              busybox, Debian's kernel, nft); the dry run
#                              only when they cannot be installed or qemu
#                              cannot run here, saying why (make demo)
set -euo pipefail
cd "$(dirname "$0")/../.."

mode=dryrun
case "${1:-}" in
"") ;;
--lab) mode=lab ;;
--lab-if-available)
	mode=lab
	echo "== the kernel lab's packages (test/lab/deps.sh --netfilter-tools; installed only when missing)"
	# deps.sh says on stderr what it installs, and why it failed.
	if [ "$(uname -s)/$(uname -m)" != Linux/x86_64 ]; then
		echo "== kernel lab unavailable (it boots an x86_64 Debian kernel under qemu on a Linux/x86_64 host; this is $(uname -s)/$(uname -m)): dry run instead"
		mode=dryrun
	elif ! test/lab/deps.sh --netfilter-tools >/dev/null; then
		echo "== kernel lab unavailable (test/lab/deps.sh could not install it, see above): dry run instead"
		mode=dryrun
	elif ! qemu_err=$(qemu-system-x86_64 -version 2>&1 >/dev/null); then
		echo "== kernel lab unavailable (qemu-system-x86_64 does not run: $qemu_err): dry run instead"
		mode=dryrun
	fi
	;;
*)
	echo "usage: $0 [--lab|--lab-if-available]" >&2
	exit 2
	;;
esac

export SWITCHYARD_KUBE_BIN=$(test/tools/kube-binaries.sh)
work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

echo "== starting etcd and kube-apiserver"
go build -o "$work/apiserver" ./test/apitest/cmd/apiserver
"$work/apiserver" -dir "$work/kube" >"$work/apiserver.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 120); do [ -s "$work/kube/kubeconfig" ] && break; sleep 0.5; done
[ -s "$work/kube/kubeconfig" ] || { cat "$work/apiserver.log"; echo "API server did not start"; exit 1; }
kubectl() { "$SWITCHYARD_KUBE_BIN/kubectl" --kubeconfig "$work/kube/kubeconfig" "$@"; }

echo "== applying sample Services and EndpointSlices"
kubectl apply -f test/demo/services.yaml
kubectl -n demo patch service shop --subresource=status --type=merge \
	-p '{"status":{"loadBalancer":{"ingress":[{"ip":"203.0.113.7"}]}}}' >/dev/null
kubectl get services -A -o wide

if [ "$mode" = lab ]; then
	echo "== building the daemon and the guest helper (static) and the lab runner"
	guest=$work/guest
	mkdir -p "$guest/testdata"
	CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$guest/testdata/switchyard" ./cmd/switchyard
	CGO_ENABLED=0 go build -trimpath -o "$guest/labguest" ./test/demo/labguest
	go build -o "$work/labrun" ./test/lab/cmd/labrun
	cp test/demo/config-lab.yaml "$guest/testdata/config.yaml"
	# The guest dials the host's loopback as 10.0.2.2; the serving
	# certificate names 127.0.0.1 and localhost, so verify it as localhost.
	port=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}' | sed 's/.*://')
	cluster=$(kubectl config view --minify -o jsonpath='{.clusters[0].name}')
	kubectl config view --raw --flatten --minify >"$guest/testdata/kubeconfig"
	"$SWITCHYARD_KUBE_BIN/kubectl" --kubeconfig "$guest/testdata/kubeconfig" config set-cluster "$cluster" \
		--server "https://10.0.2.2:$port" --tls-server-name localhost >/dev/null
	echo "== booting the kernel lab: switchyard as node-a with dataplane.mode ipvs, API server at 10.0.2.2:$port"
	start=$(date +%s)
	: >"$work/lab.out"
	# Debian's nft, with its libraries, prints the nftables table in the
	# guest (test/lab/deps.sh --netfilter-tools installs it).
	extra=()
	if [ -x /usr/sbin/nft ]; then
		extra=(-extra /usr/sbin/nft)
	else
		echo "== no /usr/sbin/nft on the host (test/lab/deps.sh --netfilter-tools): the guest summarises the nftables table instead"
	fi
	(cd "$guest" && exec "$work/labrun" run -usernet -mem 512 -timeout 4m -console "$work/console.log" "${extra[@]}" -- \
		./labguest -wait-change 60s) >"$work/lab.out" 2>&1 &
	lab=$!
	tail -n +1 -f --pid="$lab" "$work/lab.out" &
	pids+=($!)
	# Once the guest has listed the kernel's state, an endpoint of demo/web
	# starts terminating; the guest prints the virtual services that change.
	while kill -0 "$lab" 2>/dev/null && ! grep -q '^== waiting for the IPVS table to change' "$work/lab.out"; do
		sleep 0.5
	done
	if grep -q '^== waiting for the IPVS table to change' "$work/lab.out"; then
		echo "== (host) an endpoint of demo/web starts terminating"
		now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
		kubectl -n demo patch endpointslice web-abc12 --type=json -p '[
			{"op":"replace","path":"/endpoints/1/conditions","value":{"ready":false,"serving":true,"terminating":true}},
			{"op":"add","path":"/metadata/annotations","value":{"endpoints.kubernetes.io/last-change-trigger-time":"'"$now"'"}}]' >/dev/null
	fi
	rc=0
	wait "$lab" || rc=$?
	sleep 0.5 # let tail print the last lines
	if [ "$rc" -ne 0 ]; then
		echo "lab run failed (exit $rc); guest kernel console:"
		tail -n 30 "$work/console.log" 2>/dev/null || true
		exit "$rc"
	fi
	echo "== lab VM done in $(($(date +%s) - start))s"
	exit 0
fi

echo "== running switchyard as node-a"
./bin/switchyard --config test/demo/config.yaml --kubeconfig "$work/kube/kubeconfig" \
	--hostname-override node-a >"$work/switchyard.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 60); do
	curl -fsS 127.0.0.1:10256/readyz >/dev/null 2>&1 && break
	sleep 0.5
done
curl -fsS 127.0.0.1:10256/readyz >/dev/null || { cat "$work/switchyard.log"; echo "daemon not ready"; exit 1; }

echo "== the daemon's plan (dry-run dataplane, as ipvsadm -Ln would show it)"
./bin/yardctl state --address 127.0.0.1:10249 --ipvs
echo
echo "== an endpoint of demo/web starts terminating; the plan follows"
now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
kubectl -n demo patch endpointslice web-abc12 --type=json -p '[
	{"op":"replace","path":"/endpoints/1/conditions","value":{"ready":false,"serving":true,"terminating":true}},
	{"op":"add","path":"/metadata/annotations","value":{"endpoints.kubernetes.io/last-change-trigger-time":"'"$now"'"}}]' >/dev/null
sleep 1
./bin/yardctl state --address 127.0.0.1:10249 --ipvs
echo
echo "== metrics"
curl -fsS 127.0.0.1:10249/metrics | grep -E "^switchyard_(services|real_servers|sync_duration_seconds_count|network_programming_duration_seconds_count)" || true
