# WebAssembly policy SDK targets, included by the top Makefile.
#
#   make wasm-examples   build every Go SDK example into $(BIN)/wasm/<name>.wasm
#                        and a gzip copy (<name>.wasm.gz) for policy ConfigMaps
#   make wasm-test       unit, hostile-module and conformance tests of the
#                        wasm host, its codec, the builtins and the Go SDK
#                        (its own module, wasm-sdk/go: tested from there)
#   make wasm-bench      the host's per-evaluation cost with every guard on
#                        (50 and 1,000 endpoints); each example, wasm against
#                        its native reference, is wasm-conformance-bench
#   make wasm-sdk-examples  build the example policies of every SDK language from
#                        source into $(BIN)/wasm/<lang>/<example>.wasm (lang: go,
#                        rust, assemblyscript), installing missing toolchains
#   make wasm-conformance   build them and run wasm-sdk/conformance: every module
#                        through the real host, against the native Go reference;
#                        then wasm-scenarios
#   make wasm-scenarios  `yardctl policy test` of every example of every language
#                        against its scenarios and their expectations
#                        (wasm-sdk/scenarios/<example>/*.yaml)
#   make wasm-conformance-bench  per-evaluation cost of every example per language
#
# wasm-examples needs only the Go toolchain (GOOS=wasip1 GOARCH=wasm ships with
# Go). The SDK targets also need Debian's rustc with its wasm32 standard library
# (apt, installed when missing; rustup's rustc has no offline wasm32 target) and
# AssemblyScript (npm, pinned in wasm-sdk/assemblyscript/package-lock.json,
# installed into wasm-sdk/assemblyscript/node_modules).

WASM_GO_EXAMPLES := $(notdir $(patsubst %/,%,$(dir $(wildcard wasm-sdk/go/examples/*/main.go))))
WASM_PKGS := ./plugins/wasm/... ./plugins/builtin/... ./wasm-sdk/conformance/...
# The Go SDK is its own module (no dependencies, so policy authors require
# it alone): its packages build and test from its directory.
WASM_SDK_GO := wasm-sdk/go

.PHONY: wasm-examples wasm-test wasm-bench

wasm-examples: $(foreach e,$(WASM_GO_EXAMPLES),$(BIN)/wasm/$(e).wasm $(BIN)/wasm/$(e).wasm.gz)

$(BIN)/wasm/%.wasm: FORCE_WASM
	@mkdir -p $(@D)
	GOOS=wasip1 GOARCH=wasm CGO_ENABLED=0 $(GO) build -C $(WASM_SDK_GO) -buildmode=c-shared -trimpath -ldflags=-s\ -w -o $(abspath $@) ./examples/$*

$(BIN)/wasm/%.wasm.gz: $(BIN)/wasm/%.wasm
	gzip -9 -n -c $< > $@

.PHONY: FORCE_WASM
FORCE_WASM:

wasm-test:
	$(GO) test -race -count=1 $(GOTEST_FLAGS) $(WASM_PKGS)
	$(GO) test -C $(WASM_SDK_GO) -race -count=1 $(GOTEST_FLAGS) ./...

wasm-bench:
	$(GO) test -run '^$$' -bench . -benchmem $(GOTEST_FLAGS) ./plugins/wasm/

# --- Every SDK language: examples, toolchains, conformance -------------------

WASM_DIR := $(BIN)/wasm
# Every example: the Go examples' names, which the Rust and AssemblyScript
# examples match (wasm-sdk/conformance TestEveryExampleHasScenarios).
WASM_SDK_EXAMPLES := $(WASM_GO_EXAMPLES)
WASM_SDK_LANGS := go rust assemblyscript
WASM_SDK_MODULES := $(foreach l,$(WASM_SDK_LANGS),$(foreach e,$(WASM_SDK_EXAMPLES),$(WASM_DIR)/$(l)/$(e).wasm))
# Test modules reading every input field through the Rust and AssemblyScript SDKs,
# and the parameters through every SDK's helpers.
WASM_SDK_PROBES := $(WASM_DIR)/rust/probe.wasm $(WASM_DIR)/assemblyscript/probe.wasm \
	$(foreach l,$(WASM_SDK_LANGS),$(WASM_DIR)/$(l)/paramprobe.wasm)

# Debian's rustc, not rustup's (which may come first in PATH).
RUSTC_WASM ?= /usr/bin/rustc
RUSTC_WASM_FLAGS := --edition 2021 --target wasm32-unknown-unknown -O -C panic=abort -C codegen-units=1
WASM_RUST_LIB := $(WASM_DIR)/rust/.lib/libswitchyard_policy.rlib
WASM_AS := wasm-sdk/assemblyscript
ASC := $(WASM_AS)/node_modules/.bin/asc
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

.PHONY: wasm-sdk-examples wasm-conformance wasm-conformance-bench wasm-rust-toolchain wasm-scenarios

wasm-sdk-examples: $(WASM_SDK_MODULES) $(WASM_SDK_PROBES)

# Install rustc and the wasm32 standard library when missing; refresh the
# package lists only if the install fails without them.
wasm-rust-toolchain:
	@sysroot=$$($(RUSTC_WASM) --print sysroot 2>/dev/null); \
	if [ -z "$$sysroot" ] || [ ! -d "$$sysroot/lib/rustlib/wasm32-unknown-unknown" ]; then \
		echo "installing Debian rustc and libstd-rust-dev-wasm32"; \
		export DEBIAN_FRONTEND=noninteractive; \
		$(SUDO) apt-get install -y rustc libstd-rust-dev-wasm32 || \
		{ $(SUDO) apt-get update && $(SUDO) apt-get install -y rustc libstd-rust-dev-wasm32; }; \
	fi

# TestIntegrationPolicyApply and TestIntegrationPolicyWalkthrough build
# modules with every SDK's toolchain: make test-integration installs them
# first, so no language skips there.
test-integration: | wasm-rust-toolchain $(ASC)

$(ASC): $(WASM_AS)/package.json $(WASM_AS)/package-lock.json
	cd $(WASM_AS) && npm ci --no-audit --no-fund --cache "$(CACHE)/npm"
	@touch $@

$(WASM_DIR)/go/%.wasm: FORCE_WASM
	@mkdir -p $(@D)
	GOOS=wasip1 GOARCH=wasm CGO_ENABLED=0 $(GO) build -C $(WASM_SDK_GO) -buildmode=c-shared -trimpath -ldflags=-s\ -w -o $(abspath $@) ./examples/$*

$(WASM_DIR)/go/paramprobe.wasm: FORCE_WASM
	@mkdir -p $(@D)
	GOOS=wasip1 GOARCH=wasm CGO_ENABLED=0 $(GO) build -C $(WASM_SDK_GO) -buildmode=c-shared -trimpath -ldflags=-s\ -w -o $(abspath $@) ./policy/testdata/paramprobe

$(WASM_RUST_LIB): $(wildcard wasm-sdk/rust/policy/*.rs) | wasm-rust-toolchain
	@mkdir -p $(@D)
	$(RUSTC_WASM) $(RUSTC_WASM_FLAGS) --crate-type rlib --crate-name switchyard_policy -o $@ wasm-sdk/rust/policy/lib.rs

$(WASM_DIR)/rust/%.wasm: wasm-sdk/rust/examples/%.rs $(WASM_RUST_LIB) | wasm-rust-toolchain
	$(RUSTC_WASM) $(RUSTC_WASM_FLAGS) -C lto -C strip=symbols --crate-type cdylib \
		--extern switchyard_policy=$(WASM_RUST_LIB) -o $@ $<

$(WASM_DIR)/rust/probe.wasm: wasm-sdk/rust/testdata/probe.rs $(WASM_RUST_LIB) | wasm-rust-toolchain
	$(RUSTC_WASM) $(RUSTC_WASM_FLAGS) -C lto -C strip=symbols --crate-type cdylib \
		--extern switchyard_policy=$(WASM_RUST_LIB) -o $@ $<

$(WASM_DIR)/assemblyscript/probe.wasm: $(WASM_AS)/testdata/probe.ts $(wildcard $(WASM_AS)/sdk/*.ts) $(ASC)
	@mkdir -p $(@D)
	$(ASC) $< -O3 --use abort= -o $@

$(WASM_DIR)/rust/paramprobe.wasm: wasm-sdk/rust/testdata/paramprobe.rs $(WASM_RUST_LIB) | wasm-rust-toolchain
	$(RUSTC_WASM) $(RUSTC_WASM_FLAGS) -C lto -C strip=symbols --crate-type cdylib \
		--extern switchyard_policy=$(WASM_RUST_LIB) -o $@ $<

$(WASM_DIR)/assemblyscript/paramprobe.wasm: $(WASM_AS)/testdata/paramprobe.ts $(wildcard $(WASM_AS)/sdk/*.ts) $(ASC)
	@mkdir -p $(@D)
	$(ASC) $< -O3 --use abort= -o $@

$(WASM_DIR)/assemblyscript/%.wasm: $(WASM_AS)/examples/%.ts $(wildcard $(WASM_AS)/sdk/*.ts) $(ASC)
	@mkdir -p $(@D)
	$(ASC) $< -O3 --use abort= -o $@

# Part of `make test`: a missing module fails the suite (SWITCHYARD_WASM_DIR
# is set), unlike plain `go test ./...`, where it skips.
wasm-conformance: wasm-sdk-examples
	SWITCHYARD_WASM_DIR=$(abspath $(WASM_DIR)) $(GO) test -race -count=1 -timeout 30m $(GOTEST_FLAGS) ./wasm-sdk/conformance/
	$(MAKE) --no-print-directory wasm-scenarios

# The expectations are the same for every language: the examples decide
# identically (wasm-sdk/examples.md). A failed expectation prints what
# differs and stops the target. The deadline is generous: this checks
# decisions, not speed, on a loaded machine.
WASM_YARDCTL := $(WASM_DIR)/yardctl
wasm-scenarios: wasm-sdk-examples
	$(GO) build -o $(WASM_YARDCTL) ./cmd/yardctl
	@set -e; for e in $(WASM_SDK_EXAMPLES); do for l in $(WASM_SDK_LANGS); do \
		echo "yardctl policy test $(WASM_DIR)/$$l/$$e.wasm --scenario wasm-sdk/scenarios/$$e"; \
		$(WASM_YARDCTL) policy test $(WASM_DIR)/$$l/$$e.wasm --scenario wasm-sdk/scenarios/$$e --deadline 1s; \
	done; done
	@# yardctl policy build for the languages whose toolchains the unit tests may lack.
	$(WASM_YARDCTL) policy build wasm-sdk/rust/examples/zoneaware.rs --out $(WASM_DIR)/yardctl-build/rust-zoneaware.wasm
	$(WASM_YARDCTL) policy build wasm-sdk/assemblyscript/examples/zoneaware.ts --out $(WASM_DIR)/yardctl-build/as-zoneaware.wasm
	@set -e; for m in rust-zoneaware as-zoneaware; do \
		$(WASM_YARDCTL) policy test $(WASM_DIR)/yardctl-build/$$m.wasm --scenario wasm-sdk/scenarios/zoneaware --deadline 1s; \
	done

wasm-conformance-bench: wasm-sdk-examples
	SWITCHYARD_WASM_DIR=$(abspath $(WASM_DIR)) $(GO) test -run '^$$' -bench . -benchmem $(GOTEST_FLAGS) ./wasm-sdk/conformance/
