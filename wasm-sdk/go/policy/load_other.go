//go:build !wasm

package policy

func u16at(b []byte, i int) uint16      { return le.Uint16(b[i:]) }
func u32at(b []byte, i int) uint32      { return le.Uint32(b[i:]) }
func u64at(b []byte, i int) uint64      { return le.Uint64(b[i:]) }
func put32at(b []byte, i int, v uint32) { le.PutUint32(b[i:], v) }
