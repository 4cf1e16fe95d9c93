# make conformance: upstream's e2e.test v1.36.3 on test/node's real node,
# against each proxy in turn (test/conformance), then one table:
# spec | kube-proxy IPVS | kube-proxy nftables | Switchyard. Not part of
# `make test`. Needs root. It reuses a running node (make node-up) or
# brings one up, leaves it running (make node-down), and switches proxies
# through their real cleanup paths (switchyard --cleanup,
# switchyard --cleanup-kube-proxy). Each proxy's last JUnit report, log
# and run.json stay under $(CONFORMANCE_RESULTS)/PROXY;
# `make conformance-table` prints the table from them again, and merges
# chunks of one selection run into separate directories when
# CONFORMANCE_RESULTS lists them comma-separated (the last chunk that ran
# a spec gives its cell). Stopped with ^C, e2e.test gets SIGINT and still
# writes its report: the specs it finished keep their cells.
# The whole default selection with all three proxies in one run is about
# 4-5 hours under TCG on 2 cores (the Switchyard column alone, measured in
# chunks at load 12-45, is about 2 hours); run it in chunks
# (CONFORMANCE_FOCUS, one CONFORMANCE_RESULTS each) and merge them.
#
#   CONFORMANCE_PROXIES  comma-separated, run in this order (default: all three)
#   CONFORMANCE_FOCUS    --ginkgo.focus (default: the Services, Conntrack,
#                        EndpointSlice and KubeProxy network specs)
#   CONFORMANCE_SKIP     --ginkgo.skip (default: [Disruptive], [Flaky], [Feature:...])
#   CONFORMANCE_TIMEOUT  bound on each proxy's e2e.test run (--ginkgo.timeout, default 6h)
#
#   make conformance CONFORMANCE_PROXIES=switchyard \
#        CONFORMANCE_FOCUS='\[sig-network\] Services .*\[Conformance\]'
#
# make conformance-rollout: `kubectl rollout restart` of the Switchyard
# DaemonSet under traffic on the node (kube-proxy stopped through its
# cleanup first): 20 keep-alive connections and a request on a new
# connection every 200 ms to a NodePort, 30 s before the restart and 30 s
# after the rollout; fails when a connection is lost or a request fails.
# Result in $(CONFORMANCE_RESULTS)/rollout.json; Switchyard stays deployed.
#
# make conformance-bootstrap: Switchyard started on a node with no service
# proxy and without the lab's stand-in for the kubernetes Service's
# ClusterIP: without deploy's API server address (the switchyard-apiserver
# ConfigMap) its pod must stay unready for 3 minutes, with it turn Ready.
# Result in $(CONFORMANCE_RESULTS)/bootstrap.json.
#
# make conformance-smoke: four fast Services [Conformance] specs against
# Switchyard only, results in $(CACHE)/conformance-smoke.
#
# make conformance-switch: the node switched from upstream kube-proxy
# (IPVS mode) to Switchyard (kube-proxy stopped, switchyard
# --cleanup-kube-proxy, deploy/ applied) and back (kubectl delete -k,
# switchyard --cleanup, kube-proxy started) while a client outside the
# node requests a NodePort and one on the node the ClusterIP, every
# 200 ms on new connections; reports per switch the failed requests and
# the seconds without service, and fails when a cleanup left an object
# of its proxy (kube-ipvs0, KUBE-* ipsets and new KUBE-* iptables chains,
# the kube-proxy nftables tables, IPVS services; switchyard0 and the
# switchyard tables) or the service did not come back. Result in
# $(CONFORMANCE_RESULTS)/switch.json; kube-proxy (IPVS) runs at the end.
#
# make test-conformance (the last part of `make test`): on the node
# (reused when up, else brought up; taken down at the end unless
# CONFORMANCE_KEEP_NODE is set): detect-local following the Node's pod
# CIDR (patched in when the Node has none: the daemon's table must gain
# "ip saddr PODCIDR" without a restart; detect-local.json), then the smoke
# specs, which must all pass. Cold, this builds e2e.test, the kubelet,
# the control plane, agnhost, CoreDNS, the node's root filesystem and
# images (timings: test/conformance/README.md, "The cold budget").
CONFORMANCE_PROXIES ?= switchyard,kube-proxy-nftables,kube-proxy-ipvs
CONFORMANCE_FOCUS ?=
CONFORMANCE_SKIP ?=
CONFORMANCE_TIMEOUT ?= 6h
# CONFORMANCE_NODES=2: two guests (test/node), so that the multi-node specs
# run instead of skipping; each proxy then runs on both.
CONFORMANCE_NODES ?= 1
CONFORMANCE_RESULTS ?= $(CACHE)/conformance
CONFORMANCE_SMOKE_FOCUS := \[sig-network\] Services should (find a service from listing all namespaces|serve a basic endpoint from pods|serve multiport endpoints from pods|be able to create a functioning NodePort service) \[Conformance\]
CONFORMANCE := $(BIN)/conformance
CONFORMANCE_KUBE_FLAGS := $(NODE_KUBE_FLAGS) --kube-proxy --e2e
# test-conformance runs Switchyard only: no kube-proxy to build (cold, its
# 26 packages of its own and a link; the rest it shares with the kubelet).
CONFORMANCE_CHECK_KUBE_FLAGS := $(NODE_KUBE_FLAGS) --e2e

# conformance-run PROXIES FOCUS SKIP RESULTS [EXTRA FLAGS] [KUBE-BINARIES FLAGS]
define conformance-run
	@test/lab/deps.sh >/dev/null
	@$(NODE_DEPS)
	$(GO) build -o $(CONFORMANCE) ./test/conformance/cmd/conformance
	@assets=$$(test/node/assets.sh $(or $(6),$(CONFORMANCE_KUBE_FLAGS))) && eval "$$assets" && \
	$(CONFORMANCE) -kube-bin "$$bin" -rootfs "$$rootfs" -userland "$$userland" \
		-image $(BIN)/image/switchyard.tar -switchyard-bin $(BIN)/image/bin/switchyard \
		-proxies '$(1)' $(if $(2),-focus '$(2)') $(if $(3),-skip '$(3)') -results '$(4)' \
		-timeout $(CONFORMANCE_TIMEOUT) -nodes $(CONFORMANCE_NODES) $(5)
endef

CONFORMANCE_KEEP_NODE ?=
.PHONY: conformance conformance-smoke conformance-table conformance-rollout conformance-bootstrap conformance-switch test-conformance
conformance: image
	$(call conformance-run,$(CONFORMANCE_PROXIES),$(CONFORMANCE_FOCUS),$(CONFORMANCE_SKIP),$(CONFORMANCE_RESULTS))

conformance-smoke: image
	$(call conformance-run,switchyard,$(CONFORMANCE_SMOKE_FOCUS),,$(CACHE)/conformance-smoke)

conformance-rollout: image
	$(call conformance-run,switchyard,,,$(CONFORMANCE_RESULTS),-rollout)

conformance-bootstrap: image
	$(call conformance-run,switchyard,,,$(CONFORMANCE_RESULTS),-bootstrap)

conformance-switch: image
	$(call conformance-run,switchyard,,,$(CONFORMANCE_RESULTS),-switch)

test-conformance: image
	@rc=0; \
	$(MAKE) --no-print-directory conformance-check CONFORMANCE_CHECK=-detect-local || rc=1; \
	[ $$rc = 1 ] || $(MAKE) --no-print-directory conformance-check CONFORMANCE_CHECK=-require-pass \
		CONFORMANCE_CHECK_FOCUS='$(CONFORMANCE_SMOKE_FOCUS)' || rc=1; \
	[ -n "$(CONFORMANCE_KEEP_NODE)" ] || $(MAKE) --no-print-directory node-down || rc=1; \
	exit $$rc

# conformance-check: one conformance-run for test-conformance, results in
# $(CACHE)/conformance-smoke.
CONFORMANCE_CHECK ?=
CONFORMANCE_CHECK_FOCUS ?=
.PHONY: conformance-check
conformance-check:
	$(call conformance-run,switchyard,$(CONFORMANCE_CHECK_FOCUS),,$(CACHE)/conformance-smoke,$(CONFORMANCE_CHECK),$(CONFORMANCE_CHECK_KUBE_FLAGS))

conformance-table:
	$(GO) build -o $(CONFORMANCE) ./test/conformance/cmd/conformance
	$(CONFORMANCE) -table-only -results '$(CONFORMANCE_RESULTS)' \
		$(if $(CONFORMANCE_FOCUS),-focus '$(CONFORMANCE_FOCUS)') $(if $(CONFORMANCE_SKIP),-skip '$(CONFORMANCE_SKIP)')
