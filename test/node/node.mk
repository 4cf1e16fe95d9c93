# A real Kubernetes node in the qemu lab (test/node): a kubelet with
# containerd in a TCG guest, its control plane on this host in the network
# namespace switchyard-node. Included by the top Makefile; not part of
# `make test`. Needs root. It installs and builds what it needs, cached
# under $(CACHE):
#
#   1. test/lab/deps.sh: qemu, busybox and the guest kernel;
#   2. test/tools/kube-binaries.sh --kubelet --control-plane --agnhost --coredns;
#   3. test/node/rootfs.sh: the node's ext4 root filesystem (mmdebstrap);
#      test/node/userland.sh: agnhost's tools (mmdebstrap, a tar);
#      test/node/assets.sh runs 2 and 3, 3 in the background while 2
#      compiles (cold, mmdebstrap's downloads overlap the Go builds);
#      gcc and libc6-dev with apt when missing (pause.c is linked static);
#   4. nodelab up: the pause, agnhost and CoreDNS images, the namespace,
#      the control plane, the guest, the DNS add-on; it returns once the
#      Node is Ready.
#
#   make node-up                       # then: bin/nodelab kubectl get nodes
#   make node-up NODE_IMAGE=1          # also make image's switchyard image
#   make node-up NODE_UP_FLAGS='-nodes 2'   # two guests on one L2 (node1, node2)
#   make node-down
#
# NODE_UP_FLAGS goes to `nodelab up` (-nodes 2 -mem 3072 -cpus 2).
NODE_UP_FLAGS ?=
NODE_IMAGE ?=
NODELAB := $(BIN)/nodelab
NODE_KUBE_FLAGS := --kubelet --control-plane --agnhost --coredns
NODE_DEPS = test/tools/apt-deps.sh node sudo gcc libc6-dev

.PHONY: node-up node-down
node-up: $(if $(NODE_IMAGE),image)
	@test/lab/deps.sh >/dev/null
	@$(NODE_DEPS)
	$(GO) build -o $(NODELAB) ./test/node/cmd/nodelab
	@assets=$$(test/node/assets.sh $(NODE_KUBE_FLAGS)) && eval "$$assets" && \
	$(NODELAB) up -kube-bin "$$bin" -rootfs "$$rootfs" -userland "$$userland" \
		$(if $(NODE_IMAGE),-image switchyard:dev=$(BIN)/image/switchyard.tar) $(NODE_UP_FLAGS)

node-down:
	$(GO) build -o $(NODELAB) ./test/node/cmd/nodelab
	$(NODELAB) down

# test-node: TestNode (build tag node) brings the node up, runs an agnhost
# pod and reaches it from the host namespace, the guest and kubectl exec,
# deploys Switchyard from make image's image with
# test/tools/image/deploy and reaches a ClusterIP Service through it, and
# takes the node down; TestTwoNodes (NODE_RUN=TestTwoNodes) does the same
# across two guests: pod to pod between the nodes (and through a hostPort),
# Switchyard on both, a ClusterIP and a NodePort reaching a backend on the
# other node. Not part of `make test`. NODE_RUN is -run.
NODE_RUN ?= ^TestNode$$
.PHONY: test-node
test-node: image
	@test/lab/deps.sh >/dev/null
	@$(NODE_DEPS)
	@assets=$$(test/node/assets.sh $(NODE_KUBE_FLAGS)) && eval "$$assets" && \
	SWITCHYARD_KUBE_BIN=$$bin SWITCHYARD_NODE_ROOTFS=$$rootfs SWITCHYARD_NODE_USERLAND=$$userland SWITCHYARD_NODE_IMAGE=$(CURDIR)/$(BIN)/image/switchyard.tar \
	$(GO) test -tags node -count=1 -v -timeout 60m -run '$(NODE_RUN)' $(GOTEST_FLAGS) ./test/node/
