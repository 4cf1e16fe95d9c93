# Kernel lab (test/lab): guest-only suites run inside Debian's kernel booted
# under qemu with TCG, because this host's kernel has no IPVS. Included by
# the top Makefile; `make test-lab` runs it, `make test` includes it.
#
#   1. test/lab/deps.sh installs qemu-system-x86, busybox-static and xz-utils
#      with apt when missing and unpacks the kernel package into the cache;
#   2. labrun builds the cached boot assets (vmlinux, base initramfs);
#   3. the lab's own host-side tests boot VMs (verdicts, timeouts, a failing
#      guest test failing go test);
#   4. each guest suite runs in its own VM through `go test -exec labrun`;
#      ipvs/labtest loads WebAssembly policies built from source first
#      (wasm.mk's Rust SDK examples and its testdata/hostile.rs) and copied
#      into its testdata/, which labrun brings into the guest.
#
# LAB_GUEST_PKGS lists the guest suites; LAB_RUN_FLAGS goes to `labrun run`
# (e.g. -mem 512 -v).

LAB_GUEST_PKGS ?= ./ipvs ./ipvs/labtest
LAB_RUN_FLAGS ?=
LABRUN := $(CURDIR)/$(BIN)/labrun

test-lab::
	@test/lab/deps.sh >/dev/null
	$(MAKE) --no-print-directory $(WASM_DIR)/rust/canary.wasm $(WASM_DIR)/rust/leastconn.wasm $(WASM_RUST_LIB)
	$(RUSTC_WASM) $(RUSTC_WASM_FLAGS) -C lto -C strip=symbols --crate-type cdylib --extern switchyard_policy=$(WASM_RUST_LIB) \
		-o ipvs/labtest/testdata/hostile.wasm ipvs/labtest/testdata/hostile.rs
	cp $(WASM_DIR)/rust/canary.wasm $(WASM_DIR)/rust/leastconn.wasm ipvs/labtest/testdata/
	$(GO) build -o $(LABRUN) ./test/lab/cmd/labrun
	@$(LABRUN) assets >/dev/null
	CGO_ENABLED=0 $(GO) test -count=1 -timeout 30m -exec '$(LABRUN) run $(LAB_RUN_FLAGS)' $(GOTEST_FLAGS) $(LAB_GUEST_PKGS)
	$(MAKE) --no-print-directory test-lab-dsr
	SWITCHYARD_LAB_VM=1 $(GO) test -count=1 -timeout 30m $(GOTEST_FLAGS) ./test/lab/...

# test-lab-dsr: the dsr data path (ipvs/dsrlab, docs/dsr.md) in a guest
# with the ipip, fou, nft_hash, ip6_tunnel and sctp modules loaded too. `make test-lab` runs
# it. LAB_DSR_RUN_FLAGS=-extra=/usr/sbin/ip,/usr/sbin/nft lends the guest
# iproute2 and nft, whose output a failing test then logs.
LAB_DSR_MODULES := ipip,fou,nft_hash,ip6_tunnel,sctp
LAB_DSR_RUN_FLAGS ?=
.PHONY: test-lab-dsr
test-lab-dsr:
	@test/lab/deps.sh >/dev/null
	$(GO) build -o $(LABRUN) ./test/lab/cmd/labrun
	@$(LABRUN) assets >/dev/null
	CGO_ENABLED=0 $(GO) test -count=1 -timeout 30m -exec '$(LABRUN) run -mem 512 -modules $(LAB_DSR_MODULES) $(LAB_DSR_RUN_FLAGS)' $(GOTEST_FLAGS) ./ipvs/dsrlab

# demo-lab: `make demo` in the kernel lab, failing rather than falling back
# to the dry run (test/demo/run.sh --lab).
.PHONY: demo-lab
demo-lab: build
	@test/lab/deps.sh --netfilter-tools >/dev/null
	test/demo/run.sh --lab

# bench-lab: the IPVS Dataplane against the floor (a plain cloudflare/ipvs
# loop creating the same objects) in one guest boot, from scratch and for
# one endpoint change, reported as ratios (issue 3). `make bench` runs it.
# 10,000 Services x 10 endpoints takes several minutes under TCG:
#
#   make bench-lab LAB_BENCH_SERVICES=1000   # a quicker, smaller cluster
LAB_BENCH_SERVICES ?= 10000
LAB_BENCH_MEM ?= 1024
LAB_BENCH_OUT ?= $(or $(TMPDIR),/tmp)/switchyard-bench-lab.txt

.PHONY: bench-lab
bench-lab:
	@test/lab/deps.sh >/dev/null
	$(GO) build -o $(LABRUN) ./test/lab/cmd/labrun
	@set -o pipefail; CGO_ENABLED=0 $(GO) test -count=1 -run '^$$' -bench '^BenchmarkLabDataplane$$' -benchtime 1x -timeout 90m \
		-exec '$(LABRUN) run -mem $(LAB_BENCH_MEM) -env LAB_BENCH_SERVICES=$(LAB_BENCH_SERVICES)' ./ipvs/labtest | tee $(LAB_BENCH_OUT)
	@awk -f test/e2e/labsummary.awk $(LAB_BENCH_OUT)

# test-lab-cleanup: the cleanup suites with Debian's iptables and ip6tables
# (nft backend) and ipset in the guest, installed on the host when missing
# (deps.sh --netfilter-tools) and brought in with their libraries, so that
# TestCleanupKubeProxyIPTables, which `make test-lab` skips, runs too (and
# fails if the tools did not reach the guest). `make test` runs it.
LAB_NETFILTER_EXTRA := /usr/sbin/iptables,/usr/sbin/iptables-save,/usr/sbin/iptables-restore,/usr/sbin/ip6tables,/usr/sbin/ip6tables-save,/usr/sbin/ip6tables-restore,/usr/sbin/ipset,/usr/lib/x86_64-linux-gnu/xtables,/etc/protocols
LAB_NETFILTER_MODULES := nft_compat,ip_set,ip_set_hash_ip,ip_set_hash_ipport,ip_set_hash_ipportip,xt_set,xt_comment,xt_mark,xt_tcpudp,xt_MASQUERADE
.PHONY: test-lab-cleanup
test-lab-cleanup:
	@test/lab/deps.sh --netfilter-tools >/dev/null
	$(GO) build -o $(LABRUN) ./test/lab/cmd/labrun
	@$(LABRUN) assets >/dev/null
	CGO_ENABLED=0 $(GO) test -count=1 -timeout 30m -v -run '^TestCleanup' \
		-exec '$(LABRUN) run -env SWITCHYARD_LAB_NETFILTER_TOOLS=1 -extra $(LAB_NETFILTER_EXTRA) -modules $(LAB_NETFILTER_MODULES)' ./ipvs/labtest
