#!/usr/bin/env bash
# make demo: a real etcd + kube-apiserver on loopback, sample Services and
# EndpointSlices, the daemon against them, and its plan printed like
# `ipvsadm -Ln`. Cleans up after itself.
set -euo pipefail
cd "$(dirname "$0")/../.."

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
