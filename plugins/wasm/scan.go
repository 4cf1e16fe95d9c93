package wasm

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/switchyard-lb/switchyard/plugins/wasm/abi"
)

// importRef is one import of a module.
type importRef struct {
	module, name string
	kind         byte // 0 function, 1 table, 2 memory, 3 global
}

var importKinds = [...]string{"function", "table", "memory", "global"}

// scanModule reads the import and export sections of a WebAssembly
// binary without compiling it, so that a module breaking the ABI is
// refused before any compile time is spent on it. ok is false when the
// binary is not one scanModule understands; the compiler then has the
// final word.
func scanModule(b []byte) (imports []importRef, exports []string, ok bool) {
	r := reader{b: b}
	if !bytes.Equal(r.take(8), []byte("\x00asm\x01\x00\x00\x00")) {
		return nil, nil, false
	}
	for r.err == nil && len(r.b) > 0 {
		id := r.byte()
		sec := reader{b: r.take(int(r.u32()))}
		switch id {
		case 2:
			for n := sec.u32(); n > 0 && sec.err == nil; n-- {
				imp := importRef{module: sec.name(), name: sec.name(), kind: sec.byte()}
				switch imp.kind {
				case 0:
					sec.u32()
				case 1:
					sec.byte()
					sec.limits()
				case 2:
					sec.limits()
				case 3:
					sec.byte()
					sec.byte()
				default:
					sec.err = errors.New("unknown import kind")
				}
				imports = append(imports, imp)
			}
		case 7:
			for n := sec.u32(); n > 0 && sec.err == nil; n-- {
				name := sec.name()
				if sec.byte() == 0 {
					exports = append(exports, name)
				}
				sec.u32()
			}
		}
		if sec.err != nil {
			return nil, nil, false
		}
	}
	return imports, exports, r.err == nil
}

// checkImports refuses any import outside the ABI, naming it.
func checkImports(imports []importRef) error {
	for _, imp := range imports {
		if imp.kind == 0 && (imp.module == abi.ImportModule && imp.name == abi.ImportLog ||
			imp.module == wasiModule && slices.Contains(allowedWASI, imp.name)) {
			continue
		}
		kind := "import"
		if int(imp.kind) < len(importKinds) {
			kind = importKinds[imp.kind] + " import"
		}
		hint := ""
		if imp.module == "env" && imp.name == "abort" {
			hint = " (AssemblyScript's abort: compile with asc --use abort=, as yardctl policy build does)"
		}
		return fmt.Errorf("forbidden %s %s.%s: a policy may import only %s.%s and the WASI functions listed in ABI.md%s",
			kind, imp.module, imp.name, abi.ImportModule, abi.ImportLog, hint)
	}
	return nil
}

// checkMarker refuses a module without the ABI v1 marker, naming the ABI
// it was built for when it has another marker.
func checkMarker(funcExports []string) error {
	if slices.Contains(funcExports, abi.ExportMarker) {
		return nil
	}
	var other []string
	for _, name := range funcExports {
		if v, ok := strings.CutPrefix(name, "sy_abi_"); ok {
			other = append(other, v)
		}
	}
	if len(other) > 0 {
		slices.Sort(other)
		return fmt.Errorf("module is built for ABI %s; this host supports v%d", strings.Join(other, ", "), abi.Major)
	}
	return fmt.Errorf("no ABI marker: export %q is missing (is this a Switchyard policy?)", abi.ExportMarker)
}

// reader decodes the WebAssembly binary format; the first error sticks.
type reader struct {
	b   []byte
	err error
}

var errTruncated = errors.New("truncated")

func (r *reader) take(n int) []byte {
	if r.err != nil || n < 0 || n > len(r.b) {
		r.err = errTruncated
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) byte() byte {
	if v := r.take(1); v != nil {
		return v[0]
	}
	return 0
}

// uleb reads an unsigned LEB128 of at most 64 bits.
func (r *reader) uleb() uint64 {
	var v uint64
	for shift := 0; shift < 64; shift += 7 {
		c := r.byte()
		if r.err != nil {
			return 0
		}
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return v
		}
	}
	r.err = errors.New("LEB128 too long")
	return 0
}

func (r *reader) u32() uint32 {
	v := r.uleb()
	if v > 1<<32-1 {
		r.err = errors.New("u32 overflow")
		return 0
	}
	return uint32(v)
}

func (r *reader) name() string { return string(r.take(int(r.u32()))) }

func (r *reader) limits() {
	flags := r.byte()
	r.uleb()
	if flags&1 != 0 {
		r.uleb()
	}
}
