package ipvs

import (
	"fmt"
	"net/netip"

	"github.com/switchyard-lb/switchyard/core/model"
)

// In-cluster traffic to a Local frontend (VirtualService.Internal) is
// served by a firewall-mark virtual service: the nftables table marks
// such packets (from the node itself, and from pods by their source
// address) with the frontend's mark before IPVS sees them, and IPVS
// looks a packet's mark up before its address, port and protocol
// (ip_vs_service_find), so marked packets reach every endpoint while the
// rest keep the frontend's own service and its local endpoints.
//
// Marks live in the low 14 bits, below MasqueradeMark (0x4000) and
// kube-proxy's drop bit (0x8000), and IPVS matches a mark exactly, so a
// marked packet carries no other bit; the masquerade chain recognises the
// node's own marked traffic by InternalMarkMask.
const (
	// InternalMarkMask covers every internal mark.
	InternalMarkMask = 0x3fff
	// MaxInternalMarks is how many frontends can have an internal
	// service at once.
	MaxInternalMarks = InternalMarkMask
)

// MarkKey is the key the dataplane gives a firewall-mark virtual service
// of family v6 or IPv4: it has no address, port or protocol, so the key
// holds the mark in its address (0.0.0.0/8 for IPv4, ::/96 for IPv6,
// where no service lives) with port and protocol zero. Kernel, Diff and
// the firewall's owned sets handle it like any other key.
func MarkKey(mark uint32, v6 bool) model.VirtualServiceKey {
	b := [4]byte{byte(mark >> 24), byte(mark >> 16), byte(mark >> 8), byte(mark)}
	if !v6 {
		return model.VirtualServiceKey{Addr: netip.AddrFrom4(b)}
	}
	var a [16]byte
	copy(a[12:], b[:])
	return model.VirtualServiceKey{Addr: netip.AddrFrom16(a)}
}

// MarkOf returns the mark of a MarkKey; false for any other key.
func MarkOf(k model.VirtualServiceKey) (uint32, bool) {
	if k.Port != 0 || k.Protocol != 0 || !k.Addr.IsValid() {
		return 0, false
	}
	b := k.Addr.As16()
	if k.Addr.Is6() {
		for _, x := range b[:12] {
			if x != 0 {
				return 0, false
			}
		}
	}
	m := uint32(b[12])<<24 | uint32(b[13])<<16 | uint32(b[14])<<8 | uint32(b[15])
	return m, m != 0
}

// InternalMark is a frontend whose in-cluster traffic the firewall marks
// for its firewall-mark service.
type InternalMark struct {
	Key  model.VirtualServiceKey
	Mark uint32
}

// InternalFromModel is the firewall-mark service serving vs's in-cluster
// traffic (vs.Internal) under mark: vs's scheduler, flags and
// persistence with vs.Internal as destinations.
func InternalFromModel(vs model.VirtualService, scheduler string, mark uint32) (DesiredService, error) {
	if mark == 0 || mark > InternalMarkMask {
		return DesiredService{}, fmt.Errorf("virtual service %s: internal mark %#x out of range", keyString(vs.VirtualServiceKey), mark)
	}
	frontend := vs.VirtualServiceKey
	in := vs
	in.VirtualServiceKey = MarkKey(mark, vs.Addr.Is6())
	in.Destinations, in.Internal, in.SourceRanges, in.Local = vs.Internal, nil, nil, false
	ds, err := FromModel(in, scheduler)
	if err != nil {
		return DesiredService{}, fmt.Errorf("internal service of %s: %w", keyString(frontend), err)
	}
	ds.For = frontend
	return ds, nil
}

// marks hands out internal marks: a frontend keeps its mark as long as
// it is wanted (and across restarts, through the firewall table), and a
// freed mark is handed out again only after every other free one was, so
// that a packet the table still marks for an old frontend does not reach
// a new one's service.
type marks struct {
	byKey map[model.VirtualServiceKey]uint32
	used  map[uint32]bool
	next  uint32
}

func newMarks() marks {
	return marks{byKey: map[model.VirtualServiceKey]uint32{}, used: map[uint32]bool{}, next: 1}
}

// seed adopts the marks a previous Dataplane gave (the firewall table's).
func (m *marks) seed(in []InternalMark) {
	for _, im := range in {
		if im.Mark == 0 || im.Mark > InternalMarkMask || m.used[im.Mark] {
			continue
		}
		if _, ok := m.byKey[im.Key]; ok {
			continue
		}
		m.byKey[im.Key], m.used[im.Mark] = im.Mark, true
		m.next = max(m.next, im.Mark%InternalMarkMask+1)
	}
}

// get returns k's mark, assigning the next free one when k has none;
// false when every mark is taken.
func (m *marks) get(k model.VirtualServiceKey) (uint32, bool) {
	if mk, ok := m.byKey[k]; ok {
		return mk, true
	}
	for range MaxInternalMarks {
		mk := m.next
		m.next = m.next%InternalMarkMask + 1
		if !m.used[mk] {
			m.byKey[k], m.used[mk] = mk, true
			return mk, true
		}
	}
	return 0, false
}

// keep frees the marks of the frontends keep rejects.
func (m *marks) keep(keep func(model.VirtualServiceKey, uint32) bool) {
	for k, mk := range m.byKey {
		if !keep(k, mk) {
			delete(m.byKey, k)
			delete(m.used, mk)
		}
	}
}
