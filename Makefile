# Switchyard build and test entry points. `make test` is what CI runs.
# Every target installs or builds what it needs and caches it under
# $(CACHE), so a warm machine skips the slow steps.

SHELL := /bin/bash
GO ?= go
CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/switchyard
export SWITCHYARD_CACHE := $(CACHE)
BIN := bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/switchyard-lb/switchyard/core/version.Version=$(VERSION)
STATICCHECK_VERSION ?= v0.8.2
GOTEST_FLAGS ?=

.PHONY: all build image check test test-unit test-integration test-lab test-peers demo bench fuzz clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/...

# image: the daemon's container image, built without Docker or a registry
# (test/tools/image) from static binaries: an OCI layout in $(BIN)/image/oci
# and a docker archive $(BIN)/image/switchyard.tar (ctr images import,
# docker load), tagged switchyard:$(VERSION) and switchyard:dev (the tag
# test/tools/image/deploy runs). Reproducible: the binaries are built with
# -trimpath and every time in the image is the last commit's.
IMAGE_TAG := $(subst +,-,$(VERSION))
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)

image:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" -o $(BIN)/image/bin/ ./cmd/switchyard ./cmd/yardctl
	$(GO) run ./test/tools/image -version $(VERSION) -revision "$$(git rev-parse HEAD 2>/dev/null)" \
		-created $(SOURCE_DATE_EPOCH) -arch $$($(GO) env GOARCH) \
		-bin switchyard=$(BIN)/image/bin/switchyard -bin yardctl=$(BIN)/image/bin/yardctl \
		-tag switchyard:$(IMAGE_TAG) -tag switchyard:dev \
		-oci $(BIN)/image/oci -tar $(BIN)/image/switchyard.tar

# The Go policy SDK is its own module (wasm-sdk/go): checked and tested
# from its directory too.
check:
	$(GO) mod tidy -diff
	$(GO) -C wasm-sdk/go mod tidy -diff
	$(GO) vet ./...
	$(GO) -C wasm-sdk/go vet ./...
	GOOS=wasip1 GOARCH=wasm $(GO) -C wasm-sdk/go vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	cd wasm-sdk/go && $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

# test: everything. Each part prints its own go test summary; the last,
# test-conformance (test/conformance/conformance.mk), runs upstream's e2e
# smoke specs against Switchyard on a real node and prints their table.
# Cold and warm timings: test/conformance/README.md, "The cold budget".
test: check test-unit test-integration test-lab test-lab-cleanup test-cluster test-peers wasm-conformance test-conformance

test-unit:
	$(GO) test -race -count=1 -timeout 30m $(GOTEST_FLAGS) ./...
	$(GO) -C wasm-sdk/go test -race -count=1 -timeout 30m $(GOTEST_FLAGS) ./...
	@# Too slow under the race detector (a cold wasm compile; checking and packing a Go module
	@# again and again), so run once without it.
	$(GO) test -count=1 -run '^TestCompilationCacheDir$$' $(GOTEST_FLAGS) ./plugins/wasm/
	$(GO) test -count=1 -run '^TestApplyWatch(Source)?$$' $(GOTEST_FLAGS) ./cmd/yardctl/

# Integration tests run against a real etcd and kube-apiserver built from the
# Go module proxy at pinned versions (test/tools/kube-binaries.sh), with
# every SDK's toolchain installed (wasm-sdk/wasm.mk): SWITCHYARD_WASM_TOOLCHAINS
# makes a missing one fail the tests that build modules instead of skipping.
test-integration:
	@bin=$$(test/tools/kube-binaries.sh) && \
	SWITCHYARD_KUBE_BIN=$$bin SWITCHYARD_WASM_TOOLCHAINS=1 $(GO) test -tags integration -count=1 -timeout 45m -run '^TestIntegration' $(GOTEST_FLAGS) ./...

# fuzz: every Go fuzz target in the repository (grep `func Fuzz`), one at a
# time, FUZZTIME each (test/tools/fuzz.sh); not part of `make test`. A
# failing input lands in the package's testdata/fuzz/, which plain go test
# replays from then on: commit it with the fix as the regression case.
# FUZZ_RUN=regexp picks targets by "dir.FuzzName". The first run builds
# each package with coverage instrumentation (minutes for core/k8s).
FUZZTIME ?= 20s

fuzz:
	@GO="$(GO)" FUZZTIME="$(FUZZTIME)" test/tools/fuzz.sh

-include test/lab/lab.mk
-include wasm-sdk/wasm.mk
-include test/peers/peers.mk
-include test/cluster/cluster.mk
-include test/node/node.mk
-include test/conformance/conformance.mk
-include bench.mk

test-lab::
test-peers::

# demo: the daemon against a real API server, inside the kernel lab's VM
# with the ipvs dataplane, printing the kernel's IPVS table. It installs the
# lab's packages when missing, as make test does (test/lab/deps.sh); the
# dry-run dataplane on the host only when the lab cannot run, saying why.
demo: build
	test/demo/run.sh --lab-if-available

# bench: the host benchmarks the issues ask for, with a summary table
# (bench.mk); the lab benchmark of the IPVS dataplane against its floor is
# bench-lab (test/lab/lab.mk); kube-proxy side by side is bench-kubeproxy
# (bench.mk).
bench: bench-host bench-lab

clean:
	rm -rf $(BIN)
