# test-cluster: the cluster lab (test/cluster): three node namespaces, a
# router and a client in one kernel lab guest, the real switchyard daemon
# (ipvs mode) on every node against a real kube-apiserver on this host, and
# suites that send traffic across them. Included by the top Makefile and
# part of `make test` (about 70 s warm, one guest). Needs root (qemu user
# networking does not, the guest is root). It installs and builds what it needs:
#
#   1. test/lab/deps.sh: qemu, busybox and the guest kernel;
#   2. test/tools/kube-binaries.sh: etcd, kube-apiserver and kubectl;
#   3. TestCluster (build tag cluster) builds the daemon and the guest
#      suites static, starts the API server and boots one guest.
#
#   make test-cluster CLUSTER_RUN='^TestNodePort'   # some guest suites only
#
# CLUSTER_RUN is the guest's -test.run; CLUSTER_MEM its memory in MiB.
CLUSTER_RUN ?=
CLUSTER_MEM ?= 1536

.PHONY: test-cluster
test-cluster:
	@test/lab/deps.sh >/dev/null
	@bin=$$(test/tools/kube-binaries.sh) && \
	SWITCHYARD_KUBE_BIN=$$bin CLUSTER_RUN='$(CLUSTER_RUN)' CLUSTER_MEM=$(CLUSTER_MEM) \
	$(GO) test -tags cluster -count=1 -v -timeout 45m -run '^TestCluster$$' $(GOTEST_FLAGS) ./test/cluster/
