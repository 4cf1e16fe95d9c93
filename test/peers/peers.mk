# test-peers: the announcers against real peers in network namespaces
# (kernel neighbour tables, arping, FRR, BIRD). Included by the top
# Makefile. Needs root. Run by hand without root or without the peers the
# tests skip themselves; run by this target (SWITCHYARD_PEERS=1) they fail
# instead, so that make test never passes without having run them.

PEERS_APT_PACKAGES := arping iproute2 iputils-ping frr bird2

.PHONY: peers-deps

# peers-deps installs the peer software with apt when any of it is missing.
peers-deps:
	@test/tools/apt-deps.sh peers skip $(PEERS_APT_PACKAGES)

# The daemon suites (test/peers/daemon_*) run the switchyard daemon against
# a real kube-apiserver: PEERS_KUBE_BIN builds or finds the cached binaries
# (test/tools/kube-binaries.sh) and exports their directory.
PEERS_KUBE_BIN = SWITCHYARD_KUBE_BIN=$$(test/tools/kube-binaries.sh) || exit 1; export SWITCHYARD_KUBE_BIN

# Verbose so that the tests' "measured:" lines show; the per-test RUN noise
# is filtered out, and go test's exit status is kept.
test-peers:: peers-deps
	@set -o pipefail; $(PEERS_KUBE_BIN); \
	SWITCHYARD_PEERS=1 $(GO) test -tags peers -count=1 -timeout 45m -v -run '^TestPeers' $(GOTEST_FLAGS) ./... 2>&1 \
		| grep -vE '^=== (RUN|PAUSE|CONT|NAME)|^\?.*\[no test files\]|^testing: warning: no tests to run|^PASS$$|^ok .*\[no tests to run\]'

# bench-peers: the measurements issue 5 asks `make bench` for, taken
# against real peers in namespaces: layer-2 failover end to end (owner
# crash -> first TCP answer from the new owner, 5 runs each over IPv4 and
# IPv6), the ARP and NDP ownership moves, BGP assignment -> route and node
# loss -> withdrawal in FRR and BIRD, and the same through the switchyard
# daemon against a real API server. One package at a time (-p 1), so the
# timings do not compete for the CPUs; ends with every `measured:` line.
PEERS_BENCH_OUT ?= $(or $(TMPDIR),/tmp)/switchyard-bench-peers.txt

.PHONY: bench-peers
bench-peers: peers-deps
	@set -o pipefail; $(PEERS_KUBE_BIN); \
	SWITCHYARD_PEERS=1 $(GO) test -tags peers -count=1 -p 1 -v -run '^TestPeers' \
		./test/peers ./announcers/bgp 2>&1 | tee $(PEERS_BENCH_OUT) \
		| grep -vE '^=== (RUN|PAUSE|CONT|NAME)'; st=$$?; \
	echo; echo "Peer measurements (raw output in $(PEERS_BENCH_OUT)):"; \
	sed -n 's/^ *[a-z0-9_]*\.go:[0-9]*: measured: /  /p' $(PEERS_BENCH_OUT); \
	exit $$st
