# WebAssembly policy SDK targets, included by the top Makefile.
#
#   make wasm-examples   build every Go SDK example into $(BIN)/wasm/<name>.wasm
#                        and a gzip copy (<name>.wasm.gz) for policy ConfigMaps
#   make wasm-test       unit, hostile-module and conformance tests of the
#                        wasm host, its codec, the builtins and the Go SDK
#   make wasm-bench      per-evaluation cost with every guard on (50 and 1,000
#                        endpoints), wasm against native
#
# Only the Go toolchain is needed (GOOS=wasip1 GOARCH=wasm ships with Go).

WASM_GO_EXAMPLES := $(notdir $(patsubst %/,%,$(dir $(wildcard wasm-sdk/go/examples/*/main.go))))
WASM_PKGS := ./plugins/wasm/... ./plugins/builtin/... ./wasm-sdk/go/...

.PHONY: wasm-examples wasm-test wasm-bench

wasm-examples: $(foreach e,$(WASM_GO_EXAMPLES),$(BIN)/wasm/$(e).wasm $(BIN)/wasm/$(e).wasm.gz)

$(BIN)/wasm/%.wasm: FORCE_WASM
	@mkdir -p $(@D)
	GOOS=wasip1 GOARCH=wasm CGO_ENABLED=0 $(GO) build -buildmode=c-shared -trimpath -ldflags=-s\ -w -o $@ ./wasm-sdk/go/examples/$*

$(BIN)/wasm/%.wasm.gz: $(BIN)/wasm/%.wasm
	gzip -9 -n -c $< > $@

.PHONY: FORCE_WASM
FORCE_WASM:

wasm-test:
	$(GO) test -race -count=1 $(GOTEST_FLAGS) $(WASM_PKGS)

wasm-bench:
	$(GO) test -run '^$$' -bench . -benchmem $(GOTEST_FLAGS) ./plugins/wasm/ ./wasm-sdk/go/examples/
