package ipvs

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/switchyard-lb/switchyard/core/model"
)

func TestMarkKey(t *testing.T) {
	for _, tc := range []struct {
		mark uint32
		v6   bool
		addr string
	}{
		{1, false, "0.0.0.1"},
		{InternalMarkMask, false, "0.0.63.255"},
		{1, true, "::1"},
		{0x12345678, true, "::1234:5678"},
	} {
		k := MarkKey(tc.mark, tc.v6)
		if k.Addr != netip.MustParseAddr(tc.addr) || k.Port != 0 || k.Protocol != 0 {
			t.Errorf("MarkKey(%#x, %t) = %v, want %s port 0 protocol 0", tc.mark, tc.v6, k, tc.addr)
		}
		if m, ok := MarkOf(k); !ok || m != tc.mark {
			t.Errorf("MarkOf(MarkKey(%#x, %t)) = %#x, %t", tc.mark, tc.v6, m, ok)
		}
		if err := ValidateService(Service{VirtualServiceKey: k, Scheduler: "rr"}); err != nil {
			t.Errorf("ValidateService of mark %#x: %v", tc.mark, err)
		}
	}
	for _, k := range []model.VirtualServiceKey{
		{Addr: netip.MustParseAddr("0.0.0.1"), Port: 80},
		{Addr: netip.MustParseAddr("0.0.0.1"), Protocol: model.TCP},
		{Addr: netip.MustParseAddr("0.0.0.0")},
		{Addr: netip.MustParseAddr("fd00::1")},
		{},
	} {
		if m, ok := MarkOf(k); ok {
			t.Errorf("MarkOf(%v) = %#x, want no mark", k, m)
		}
	}
}

func TestInternalFromModel(t *testing.T) {
	frontend := model.VirtualServiceKey{Addr: netip.MustParseAddr("fd00:96::1"), Port: 443, Protocol: model.TCP}
	vs := model.VirtualService{
		VirtualServiceKey: frontend, Kind: model.FrontendLoadBalancer, Local: true, Scheduler: "mh", Flags: []string{"mh-port"},
		AffinityTimeout: 90 * time.Second, SourceRanges: []netip.Prefix{netip.MustParsePrefix("2001:db8::/32")},
		Destinations: []model.Destination{{Addr: netip.MustParseAddr("fd00:244:1::2"), Port: 8443, Weight: 3}},
		Internal: []model.Destination{
			{Addr: netip.MustParseAddr("fd00:244:2::2"), Port: 8443, Weight: 1},
			{Addr: netip.MustParseAddr("fd00:244:1::2"), Port: 8443, Weight: 1},
		},
	}
	got, err := InternalFromModel(vs, "rr", 9)
	if err != nil {
		t.Fatal(err)
	}
	want := DesiredService{
		Service: Service{VirtualServiceKey: MarkKey(9, true), Scheduler: "mh",
			Flags: FlagSchedOpt2 | FlagPersistent, Persistence: 90 * time.Second},
		Destinations: []Destination{
			{DestinationKey: DestinationKey{Addr: netip.MustParseAddr("fd00:244:1::2"), Port: 8443}, Weight: 1},
			{DestinationKey: DestinationKey{Addr: netip.MustParseAddr("fd00:244:2::2"), Port: 8443}, Weight: 1},
		},
		Kind: model.FrontendLoadBalancer, For: frontend,
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateComparable(netip.Addr{}), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("InternalFromModel (-want +got):\n%s", diff)
	}
	for _, m := range []uint32{0, InternalMarkMask + 1} {
		if _, err := InternalFromModel(vs, "rr", m); err == nil {
			t.Errorf("InternalFromModel with mark %#x: no error", m)
		}
	}
}

func TestMarksAreStableAndExhaust(t *testing.T) {
	key := func(i int) model.VirtualServiceKey {
		return model.VirtualServiceKey{Addr: netip.AddrFrom4([4]byte{198, 51, byte(i >> 8), byte(i)}), Port: 80, Protocol: model.TCP}
	}
	m := newMarks()
	// Seeded marks stay with their keys; new keys start after the highest.
	m.seed([]InternalMark{{Key: key(0), Mark: 5}, {Key: key(1), Mark: 5}, {Key: key(2), Mark: 0}})
	if got, _ := m.get(key(0)); got != 5 {
		t.Errorf("seeded key got mark %d, want 5", got)
	}
	if got, _ := m.get(key(1)); got != 6 {
		t.Errorf("a key whose seeded mark was taken got %d, want the next free one, 6", got)
	}
	// A freed mark is not handed out again before the others.
	m.keep(func(k model.VirtualServiceKey, _ uint32) bool { return k != key(0) })
	if got, _ := m.get(key(3)); got != 7 {
		t.Errorf("after freeing 5, a new key got %d, want 7", got)
	}
	for i := 4; len(m.used) < MaxInternalMarks; i++ {
		if _, ok := m.get(key(i)); !ok {
			t.Fatalf("get failed with %d marks used", len(m.used))
		}
	}
	if mk, ok := m.get(key(0xffff)); ok {
		t.Errorf("with every mark used, a new key got %d", mk)
	}
	if got, ok := m.get(key(1)); !ok || got != 6 {
		t.Errorf("with every mark used, a known key got %d, %t; want its own 6", got, ok)
	}
}
