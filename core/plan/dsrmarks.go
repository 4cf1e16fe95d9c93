package plan

import (
	"errors"
	"maps"
	"slices"
)

// DSRMarks hands out the dsr peer marks of a node's peers and keeps them
// stable: a node keeps its mark for as long as it is among the nodes,
// and a node joining takes the lowest free mark, so that no other peer's
// firewall-mark service is renumbered (rebuilt) when a node joins or
// leaves. Marks are local to the node that hands them out. The zero
// value is ready; it is not goroutine-safe.
type DSRMarks struct {
	byNode map[string]uint32
	used   map[uint32]bool
	// version counts the changes of byNode (Version).
	version uint64
}

// Version changes whenever a node's mark does (one is given or
// released), so that a reader of Marks knows when to read again.
func (m *DSRMarks) Version() uint64 { return m.version }

// Assign returns the mark of every node named (duplicates ignored),
// releasing the marks of nodes no longer named first, then giving the
// new ones, in name order, the lowest free marks. It fails only past
// 65,535 nodes.
func (m *DSRMarks) Assign(nodes []string) (map[string]uint32, error) {
	if m.byNode == nil {
		m.byNode, m.used = map[string]uint32{}, map[uint32]bool{}
	}
	names := slices.Compact(slices.Sorted(slices.Values(nodes)))
	for n, mark := range m.byNode {
		if _, found := slices.BinarySearch(names, n); !found {
			delete(m.byNode, n)
			delete(m.used, mark)
			m.version++
		}
	}
	next := 0
	out := make(map[string]uint32, len(names))
	for _, n := range names {
		mark, ok := m.byNode[n]
		if !ok {
			for m.used[DSRMark(next)] {
				next++
			}
			if next >= 1<<16-1 {
				return nil, errTooManyNodes
			}
			mark = DSRMark(next)
			m.byNode[n], m.used[mark] = mark, true
			m.version++
		}
		out[n] = mark
	}
	return out, nil
}

// Keep gives nodes the marks of byNode before the first Assign (a
// restarted daemon's, read back from the kernel): a node keeps its mark
// as long as Assign names it. Marks that are no peer mark, held by
// another node already, or given to a node that has one are ignored.
func (m *DSRMarks) Keep(byNode map[string]uint32) {
	if m.byNode == nil {
		m.byNode, m.used = map[string]uint32{}, map[uint32]bool{}
	}
	for _, n := range slices.Sorted(maps.Keys(byNode)) {
		mark := byNode[n]
		if _, has := m.byNode[n]; has || m.used[mark] || mark == 0 || mark&0xffff != 0 {
			continue
		}
		m.byNode[n], m.used[mark] = mark, true
		m.version++
	}
}

// Marks returns a copy of every node's mark, as last assigned.
func (m *DSRMarks) Marks() map[string]uint32 {
	return maps.Clone(m.byNode)
}

var errTooManyNodes = errors.New("dsr: more than 65535 nodes: no peer mark left")
