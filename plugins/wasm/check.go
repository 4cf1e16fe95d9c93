package wasm

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/switchyard-lb/switchyard/plugins/wasm/abi"
)

// allowedWASI are the WASI functions a Go wasip1 reactor imports. With no
// arguments, environment or preopens they expose nothing of the host.
var allowedWASI = []string{
	"args_get", "args_sizes_get", "environ_get", "environ_sizes_get",
	"clock_res_get", "clock_time_get", "fd_write", "fd_close", "fd_fdstat_get",
	"fd_fdstat_set_flags", "fd_prestat_get", "fd_prestat_dir_name",
	"poll_oneoff", "proc_exit", "random_get", "sched_yield",
}

const wasiModule = "wasi_snapshot_preview1"

type signature struct {
	params, results []api.ValueType
}

var (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64

	requiredExports = []struct {
		name string
		sig  signature
	}{
		{abi.ExportMarker, signature{}},
		{abi.ExportAlloc, signature{[]api.ValueType{i32}, []api.ValueType{i32}}},
		{abi.ExportEvaluate, signature{[]api.ValueType{i32, i32}, []api.ValueType{i64}}},
	}
	optionalExports = map[string]signature{
		abi.ExportOnTick: {},
		abi.ExportInit:   {},
	}
)

// checkModule refuses a compiled module that does not follow ABI v1, and
// reports which optional exports it has.
func checkModule(cm wazero.CompiledModule) (hasInit, hasTick bool, err error) {
	var imports []importRef
	for _, f := range cm.ImportedFunctions() {
		mod, name, _ := f.Import()
		imports = append(imports, importRef{module: mod, name: name, kind: 0})
		if mod == abi.ImportModule && name == abi.ImportLog {
			if err := checkSignature(f, signature{[]api.ValueType{i32, i32, i32}, nil}); err != nil {
				return false, false, fmt.Errorf("import %s.%s: %w", mod, name, err)
			}
		}
	}
	for _, m := range cm.ImportedMemories() {
		mod, name, _ := m.Import()
		imports = append(imports, importRef{module: mod, name: name, kind: 2})
	}
	if err := checkImports(imports); err != nil {
		return false, false, err
	}
	if _, ok := cm.ExportedMemories()[abi.ExportMemory]; !ok {
		return false, false, fmt.Errorf("no exported memory %q", abi.ExportMemory)
	}
	exports := cm.ExportedFunctions()
	if err := checkMarker(slices.Collect(maps.Keys(exports))); err != nil {
		return false, false, err
	}
	for _, want := range requiredExports {
		f, ok := exports[want.name]
		if !ok {
			return false, false, fmt.Errorf("required export %q is missing", want.name)
		}
		if err := checkSignature(f, want.sig); err != nil {
			return false, false, fmt.Errorf("export %q: %w", want.name, err)
		}
	}
	for name, sig := range optionalExports {
		f, ok := exports[name]
		if !ok {
			continue
		}
		if err := checkSignature(f, sig); err != nil {
			return false, false, fmt.Errorf("export %q: %w", name, err)
		}
		switch name {
		case abi.ExportInit:
			hasInit = true
		case abi.ExportOnTick:
			hasTick = true
		}
	}
	return hasInit, hasTick, nil
}

func checkSignature(f api.FunctionDefinition, want signature) error {
	if !slices.Equal(f.ParamTypes(), want.params) || !slices.Equal(f.ResultTypes(), want.results) {
		return fmt.Errorf("signature %s, want %s", sigString(f.ParamTypes(), f.ResultTypes()), sigString(want.params, want.results))
	}
	return nil
}

func sigString(params, results []api.ValueType) string {
	names := func(ts []api.ValueType) string {
		s := make([]string, len(ts))
		for i, t := range ts {
			s[i] = api.ValueTypeName(t)
		}
		return "(" + strings.Join(s, ", ") + ")"
	}
	return names(params) + " -> " + names(results)
}
