# bench.mk: the host benchmarks issues 2, 4 and 5 ask for, with a summary
# table. The top-level Makefile includes it (`-include bench.mk`) and makes
# `bench` depend on `bench-host`.
#
#   make bench-host                    # about 3-4 minutes on 2 cores
#   make bench-host BENCHTIME=3s       # steadier numbers, slower
#   make bench-host BENCH_OUT=/tmp/b   # keep the raw `go test -bench` output
#
# The benchmarks:
#   core/plan        the initial full plan and one endpoint change at 1k, 10k
#                    and 50k Services (10 endpoints each): the change must
#                    stay flat as the cluster grows
#   core/k8s         the change tracker: one EndpointSlice change, and the
#                    initial sync of a whole cluster
#   core/policystage a statistics tick re-evaluating the policies of 10,000
#                    Services
#   core/reconcile   one Sync taking one endpoint change at 1k and 10k
#                    ClusterIP or LoadBalancer (BGP-announced) Services,
#                    with or without the policy stage
#   plugins/wasm     one WebAssembly policy evaluation with 50 and 1,000
#                    endpoints
#   core/ipam        one allocation and release with 60,000 addresses used

SHELL := /bin/bash
GO ?= go
BENCHTIME ?= 1s
BENCH_OUT ?= $(or $(TMPDIR),/tmp)/switchyard-bench.txt

# bench_run runs benchmarks $(2) of package $(1), streaming and keeping
# go test's output.
bench_run = echo "== $(1) $(2)"; \
	$(GO) test -run '^$$' -bench '$(2)' -benchmem -benchtime $(BENCHTIME) -count 1 $(1) | tee -a $(BENCH_OUT) || exit 1;

.PHONY: bench-host

# bench-host runs one package at a time, so the measurements do not
# compete for the CPUs, and ends with one table: time, bytes and
# allocations per operation.
bench-host:
	@set -o pipefail; : > $(BENCH_OUT); \
	$(call bench_run,./core/plan,^(BenchmarkPlanFull|BenchmarkPlanEndpointChange)$$) \
	$(call bench_run,./core/k8s,^(BenchmarkTrackerEndpointChange|BenchmarkTrackerInitialSync)$$) \
	$(call bench_run,./core/policystage,^BenchmarkPolicyReevaluateAll$$) \
	$(call bench_run,./core/reconcile,^BenchmarkSyncEndpointChange$$) \
	$(call bench_run,./plugins/wasm,^BenchmarkEvaluate$$) \
	$(call bench_run,./core/ipam,^BenchmarkAllocate$$) \
	echo; echo "Summary (benchtime $(BENCHTIME); raw output in $(BENCH_OUT)):"; \
	awk -f test/e2e/benchsummary.awk $(BENCH_OUT)

# The peer measurements (layer-2 failover, BGP route times) of issue 5:
# bench-peers in test/peers/peers.mk, which needs root and the peers.
bench: bench-peers

# bench-kubeproxy: upstream kube-proxy v1.36.3 in IPVS mode and in nftables
# mode side by side with the switchyard daemon and the raw floor, in one
# kernel lab guest against the host's API server (test/e2e/kpbench). It
# builds kube-proxy once (test/tools/kube-binaries.sh --kube-proxy) and
# installs Debian's iptables, ipset and nftables when missing
# (test/lab/deps.sh --netfilter-tools). About 13 minutes at the default
# 1,000 Services x 10 endpoints on a loaded host (kube-proxy's IPVS mode's
# first full sync alone takes 7 of them; switchyard's policy parts, below,
# about 1), 5.5 at 100 (README, Performance, has the tables). KPBENCH_ONLY
# picks and orders the parts (default floor,kube-proxy,kube-proxy-nftables,
# switchyard,switchyard-local-first,switchyard-wasm; kube-proxy is its IPVS
# mode):
#
#   make bench-kubeproxy KPBENCH_SERVICES=100                # quicker
#   make bench-kubeproxy KPBENCH_SERVICES=10000              # the 10k run
#   make bench-kubeproxy KPBENCH_ONLY=floor,switchyard       # no kube-proxy
#   make bench-kubeproxy KPBENCH_ONLY=floor,switchyard KPBENCH_RESYNC=1
#                      # and switchyard's CPU over one syncPeriod holding a
#                      # periodic full resync (about a minute more)
#
# Switchyard by balancing policy, each a further part of KPBENCH_ONLY,
# printed side by side (start, changes, RSS after the first full sync and
# at the end, each kube-proxy's RSS against it) below the main table:
#   switchyard              the default config, which has no policy
#                           (policies.default ""; nothing turns the policy
#                           stage off: it evaluates builtin:uniform)
#   switchyard-local-first  policies.default: builtin:local-first, a
#                           non-default built-in, on every Service
#   switchyard-wasm         a WebAssembly policy on 100 Services: the guest
#                           creates the policy ConfigMap (switchyard-system,
#                           binaryData policy.wasm.gz) and annotates them
#                           switchyard.dev/policy before the run, undoes
#                           both after; the run fails unless each of them
#                           was evaluated without a failure. The module is
#                           KPBENCH_WASM, by default wasm-sdk's Go leastconn
#                           (make wasm-sdk-examples' rule builds it; e.g.
#                           KPBENCH_WASM=bin/wasm/rust/leastconn.wasm)
# Both parts together added about a minute at 1,000 Services (the Go
# module's compilation is most of it), 45 s at 100:
#
#   make bench-kubeproxy KPBENCH_SERVICES=100 KPBENCH_ONLY=floor,switchyard,switchyard-local-first,switchyard-wasm
#
# Before and after a change, alternated in one boot: build the other
# revision's daemon (static, outside /tmp) and name it switchyard-base;
# KPBENCH_SWITCHYARD_ARGS=--v=4 KPBENCH_LOG_TAIL=400000 adds the daemon's
# per-stage timings of each change (watch, queued, plan, policies, and
# the dataplane's want-and-read, diff-and-ops, firewall):
#
#   make bench-kubeproxy KPBENCH_SWITCHYARD_BASE=$HOME/.cache/switchyard/kpbench/base \
#     KPBENCH_ONLY=floor,switchyard-base,switchyard,switchyard-base,switchyard KPBENCH_CHANGES=7
#
# A CPU profile of switchyard's changes (not its start): KPBENCH_PROFILE=60s
# KPBENCH_PROFILE_FROM=changes profiles it for 60 s from the end of its
# first full sync, saved to KPBENCH_PROFILE_OUT (go tool pprof).
# KPBENCH_HEAP=1 saves its heap profile as its first full sync ended to
# KPBENCH_HEAP_OUT (-sample_index=alloc_space: what the start allocated).
#
# KPBENCH_ONLY=switch measures instead a node switching from kube-proxy to
# switchyard with --cleanup-kube-proxy (seconds without service) and back
# with --cleanup, failing on any object either cleanup leaves (about 1.5
# minutes at 100 Services):
#
#   make bench-kubeproxy KPBENCH_SERVICES=100 KPBENCH_ONLY=switch
KPBENCH_SERVICES ?= 1000
KPBENCH_CHANGES ?= 5
KPBENCH_ONLY ?=
KPBENCH_RESYNC ?=
KPBENCH_SWITCHYARD_BASE ?=
KPBENCH_WASM ?= $(WASM_DIR)/go/leastconn.wasm
.PHONY: bench-kubeproxy
bench-kubeproxy:
	@test/lab/deps.sh --netfilter-tools >/dev/null
	$(if $(or $(findstring switchyard-wasm,$(KPBENCH_ONLY)),$(if $(KPBENCH_ONLY),,default)),@$(MAKE) --no-print-directory $(KPBENCH_WASM))
	@bin=$$(test/tools/kube-binaries.sh --kube-proxy) && \
	SWITCHYARD_KUBE_BIN=$$bin KPBENCH_WASM=$(abspath $(KPBENCH_WASM)) KPBENCH_SWITCHYARD_BASE=$(KPBENCH_SWITCHYARD_BASE) KPBENCH_SERVICES=$(KPBENCH_SERVICES) KPBENCH_CHANGES=$(KPBENCH_CHANGES) KPBENCH_ONLY=$(KPBENCH_ONLY) KPBENCH_RESYNC=$(KPBENCH_RESYNC) \
	$(GO) test -tags integration -count=1 -run '^$$' -bench '^BenchmarkIntegrationKubeProxyIPVS$$' -benchtime 1x -timeout 4h ./test/e2e/kpbench

bench: bench-kubeproxy
