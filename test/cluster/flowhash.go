package cluster

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
)

// FlowSlot is the Maglev slot the dsr table (ipvs.NFTDSR) gives a flow
// from client: nftables' jhash of the source address and port (the
// port's register zero-padded to 4 bytes) with seed, scaled to size as
// nft_jhash_eval does (reciprocal_scale, not a remainder). With the
// planner's Maglev table (core/maglev) over the same backend nodes, it
// tells which node a flow's packets go to, whichever node they enter.
func FlowSlot(client netip.AddrPort, seed uint32, size uint64) uint64 {
	a := client.Addr().AsSlice()
	key := make([]byte, len(a)+4)
	copy(key, a)
	binary.BigEndian.PutUint16(key[len(a):], client.Port())
	return uint64(jhash(key, seed)) * size >> 32
}

// jhash is the kernel's jhash (include/linux/jhash.h, Bob Jenkins'
// lookup3 over bytes).
func jhash(k []byte, seed uint32) uint32 {
	n := uint32(len(k))
	a := 0xdeadbeef + n + seed
	b, c := a, a
	for len(k) > 12 {
		a += binary.LittleEndian.Uint32(k)
		b += binary.LittleEndian.Uint32(k[4:])
		c += binary.LittleEndian.Uint32(k[8:])
		a, b, c = jhashMix(a, b, c)
		k = k[12:]
	}
	if len(k) == 0 {
		return c
	}
	var tail [12]byte
	copy(tail[:], k)
	a += binary.LittleEndian.Uint32(tail[:])
	b += binary.LittleEndian.Uint32(tail[4:])
	c += binary.LittleEndian.Uint32(tail[8:])
	return jhashFinal(a, b, c)
}

func jhashMix(a, b, c uint32) (uint32, uint32, uint32) {
	a -= c
	a ^= bits.RotateLeft32(c, 4)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 6)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 8)
	b += a
	a -= c
	a ^= bits.RotateLeft32(c, 16)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 19)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 4)
	b += a
	return a, b, c
}

func jhashFinal(a, b, c uint32) uint32 {
	c ^= b
	c -= bits.RotateLeft32(b, 14)
	a ^= c
	a -= bits.RotateLeft32(c, 11)
	b ^= a
	b -= bits.RotateLeft32(a, 25)
	c ^= b
	c -= bits.RotateLeft32(b, 16)
	a ^= c
	a -= bits.RotateLeft32(c, 4)
	b ^= a
	b -= bits.RotateLeft32(a, 14)
	c ^= b
	c -= bits.RotateLeft32(b, 24)
	return c
}
