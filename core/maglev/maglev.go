package maglev

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// Backend is one entry of a table: a backend (a node) by name, and its
// weight. A backend of weight w gets about w/sum(weights) of the slots;
// weight 0 gets none.
type Backend struct {
	Name   string
	Weight uint32
}

// MaxSize bounds the table size: a table holds one index per slot.
const MaxSize = 1<<24 - 3 // 16777213, the largest prime below 2^24

// Table is a Maglev lookup table. It is immutable and safe for
// concurrent use.
type Table struct {
	names []string // backends with weight > 0, sorted
	slots []uint32 // slot -> index in names; nil when names is empty
	size  uint64
}

// New builds the table of size slots (a prime: SizeFor) over backends,
// hashing their names with seed. The order of backends does not matter:
// the same set, size and seed give the same table. Backends of weight 0
// get no slot; without a backend of positive weight the table is empty
// (Lookup returns ""). Names must be unique and non-empty.
func New(backends []Backend, size uint64, seed []byte) (*Table, error) {
	if size < 2 || size > MaxSize || !isPrime(size) {
		return nil, fmt.Errorf("maglev: table size %d: want a prime from 2 to %d", size, MaxSize)
	}
	bs := slices.Clone(backends)
	slices.SortFunc(bs, func(a, b Backend) int { return cmp.Compare(a.Name, b.Name) })
	for i, b := range bs {
		if b.Name == "" {
			return nil, errors.New("maglev: backend without a name")
		}
		if i > 0 && bs[i-1].Name == b.Name {
			return nil, fmt.Errorf("maglev: backend %q given twice", b.Name)
		}
	}
	bs = slices.DeleteFunc(bs, func(b Backend) bool { return b.Weight == 0 })
	t := &Table{names: make([]string, len(bs)), size: size}
	for i, b := range bs {
		t.names[i] = b.Name
	}
	if len(bs) == 0 {
		return t, nil
	}
	t.slots = populate(bs, size, seed)
	return t, nil
}

// populate is the paper's Populate (Pseudocode 1) with weights: in each
// round every backend adds its weight to its credit and, for each whole
// maximum weight of credit, takes its next preferred slot still free.
// The heaviest backends take one slot per round, a backend of half their
// weight one every other round.
func populate(bs []Backend, size uint64, seed []byte) []uint32 {
	const empty = ^uint32(0)
	offset := make([]uint64, len(bs))
	skip := make([]uint64, len(bs))
	next := make([]uint64, len(bs))
	credit := make([]uint64, len(bs))
	var maxWeight uint64
	for i, b := range bs {
		offset[i], skip[i] = permutation(b.Name, size, seed)
		maxWeight = max(maxWeight, uint64(b.Weight))
	}
	slots := make([]uint32, size)
	for i := range slots {
		slots[i] = empty
	}
	for filled := uint64(0); filled < size; {
		for i, b := range bs {
			credit[i] += uint64(b.Weight)
			for ; credit[i] >= maxWeight && filled < size; credit[i] -= maxWeight {
				// The j-th preference is (offset + j*skip) mod size; skip
				// and size are coprime, so it visits every slot.
				c := (offset[i] + next[i]*skip[i]) % size
				for slots[c] != empty {
					next[i]++
					c = (offset[i] + next[i]*skip[i]) % size
				}
				slots[c] = uint32(i)
				next[i]++
				filled++
			}
		}
	}
	return slots
}

// permutation returns a backend's offset in [0, size) and skip in
// [1, size), the two hashes of its name the paper derives its preference
// list from, here the two halves of SHA-256(seed, name).
func permutation(name string, size uint64, seed []byte) (offset, skip uint64) {
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(seed)))
	h.Write(n[:])
	h.Write(seed)
	h.Write([]byte(name))
	sum := h.Sum(nil)
	return binary.BigEndian.Uint64(sum[0:8]) % size, binary.BigEndian.Uint64(sum[8:16])%(size-1) + 1
}

// Size returns the number of slots.
func (t *Table) Size() uint64 { return t.size }

// At returns the backend owning slot, which must be below Size; "" when
// the table is empty.
func (t *Table) At(slot uint64) string {
	if t.slots == nil {
		return ""
	}
	return t.names[t.slots[slot]]
}

// Lookup returns the backend for a flow's hash: the owner of slot
// hash mod Size. "" when the table is empty.
func (t *Table) Lookup(hash uint64) string { return t.At(hash % t.size) }

// Shares returns how many slots each backend owns; backends of weight 0
// are absent.
func (t *Table) Shares() map[string]int {
	out := make(map[string]int, len(t.names))
	for _, i := range t.slots {
		out[t.names[i]]++
	}
	return out
}

// SizeFor returns the smallest prime at least 100 times backends (and at
// least 251, the smallest size Cilium allows), the size the paper
// recommends for backends backends; it fails beyond MaxSize.
func SizeFor(backends int) (uint64, error) {
	want := max(uint64(max(backends, 0))*100, 251)
	for m := want; m <= MaxSize; m++ {
		if isPrime(m) {
			return m, nil
		}
	}
	return 0, fmt.Errorf("maglev: no table size for %d backends: more than %d slots", backends, MaxSize)
}

func isPrime(n uint64) bool {
	if n < 2 {
		return false
	}
	for d := uint64(2); d*d <= n; d++ {
		if n%d == 0 {
			return false
		}
	}
	return true
}

// ValidSize reports whether New takes size: a prime from 2 to MaxSize.
func ValidSize(size uint64) bool { return size >= 2 && size <= MaxSize && isPrime(size) }
