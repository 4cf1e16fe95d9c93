package wasmtest

// CustomSections lists the names of the custom sections of the module b
// (a "name" section keeps function names for stack traces), in order; it
// stops at the first malformed section.
func CustomSections(b []byte) []string {
	// leb reads an unsigned LEB128 at i, returning it and the index after.
	leb := func(i int) (uint64, int) {
		var v uint64
		for s := 0; i < len(b) && s < 64; s += 7 {
			c := b[i]
			i++
			v |= uint64(c&0x7f) << s
			if c < 0x80 {
				break
			}
		}
		return v, i
	}
	var names []string
	for i := 8; i < len(b); {
		id := b[i]
		n, j := leb(i + 1)
		if n > uint64(len(b)-j) {
			break
		}
		if id == 0 {
			l, k := leb(j)
			if l > uint64(len(b)-k) {
				break
			}
			names = append(names, string(b[k:k+int(l)]))
		}
		i = j + int(n)
	}
	return names
}
