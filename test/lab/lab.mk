# Kernel lab (test/lab): guest-only suites run inside Debian's kernel booted
# under qemu with TCG, because this host's kernel has no IPVS. Included by
# the top Makefile; `make test-lab` runs it, `make test` includes it.
#
#   1. test/lab/deps.sh installs qemu-system-x86, busybox-static and xz-utils
#      with apt when missing and unpacks the kernel package into the cache;
#   2. labrun builds the cached boot assets (vmlinux, base initramfs);
#   3. the lab's own host-side tests boot VMs (verdicts, timeouts, a failing
#      guest test failing go test);
#   4. each guest suite runs in its own VM through `go test -exec labrun`.
#
# LAB_GUEST_PKGS lists the guest suites; LAB_RUN_FLAGS goes to `labrun run`
# (e.g. -mem 512 -v).

LAB_GUEST_PKGS ?= ./ipvs ./ipvs/labtest
LAB_RUN_FLAGS ?=
LABRUN := $(CURDIR)/$(BIN)/labrun

test-lab::
	@test/lab/deps.sh >/dev/null
	$(GO) build -o $(LABRUN) ./test/lab/cmd/labrun
	@$(LABRUN) assets >/dev/null
	CGO_ENABLED=0 $(GO) test -count=1 -exec '$(LABRUN) run $(LAB_RUN_FLAGS)' $(GOTEST_FLAGS) $(LAB_GUEST_PKGS)
	SWITCHYARD_LAB_VM=1 $(GO) test -count=1 $(GOTEST_FLAGS) ./test/lab/...

# demo-lab: `make demo` in the kernel lab, failing rather than falling back
# to the dry run (test/demo/run.sh --lab).
.PHONY: demo-lab
demo-lab: build
	@test/lab/deps.sh >/dev/null
	test/demo/run.sh --lab
