package ipvs

import (
	"net/netip"
	"testing"
	"time"

	cipvs "github.com/cloudflare/ipvs"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/switchyard-lb/switchyard/core/model"
)

func TestServiceConversionRoundTrip(t *testing.T) {
	tests := []Service{
		{VirtualServiceKey: model.VirtualServiceKey{Addr: netip.MustParseAddr("10.96.0.1"), Port: 443, Protocol: model.TCP}, Scheduler: "rr"},
		{VirtualServiceKey: model.VirtualServiceKey{Addr: netip.MustParseAddr("10.96.0.2"), Port: 53, Protocol: model.UDP}, Scheduler: "mh", Flags: FlagSchedOpt1 | FlagSchedOpt2},
		{VirtualServiceKey: model.VirtualServiceKey{Addr: netip.MustParseAddr("fd00::1"), Port: 9, Protocol: model.SCTP}, Scheduler: "wrr", Flags: FlagPersistent, Persistence: 10800 * time.Second},
		{VirtualServiceKey: MarkKey(7, false), Scheduler: "rr"},
		{VirtualServiceKey: MarkKey(InternalMarkMask, true), Scheduler: "sh", Flags: FlagPersistent, Persistence: 30 * time.Second},
	}
	for _, want := range tests {
		t.Run(keyString(want.VirtualServiceKey), func(t *testing.T) {
			lib := toLibService(want)
			if !lib.Netmask.IsValid() || lib.Netmask.Bits() != want.Addr.BitLen() {
				t.Errorf("netmask %v, want a full /%d", lib.Netmask, want.Addr.BitLen())
			}
			if m, fwmark := MarkOf(want.VirtualServiceKey); fwmark && (lib.FWMark != m || lib.Address.IsValid() || lib.Port != 0) {
				t.Errorf("firewall-mark service sent as %+v, want mark %d and no address or port", lib, m)
			}
			lib.Flags |= 0x0002 // the kernel adds "hashed"
			got, ok := fromLibService(lib)
			if !ok {
				t.Fatal("fromLibService dropped the service")
			}
			if diff := cmp.Diff(want, got, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFromLibServiceSkipsWhatItCannotOwn(t *testing.T) {
	for name, s := range map[string]cipvs.Service{
		"no address":       {Family: cipvs.INET, Protocol: cipvs.TCP, Port: 80, Scheduler: "rr"},
		"unknown protocol": {Address: netip.MustParseAddr("10.0.0.1"), Port: 1, Protocol: 50, Scheduler: "rr"},
	} {
		t.Run(name, func(t *testing.T) {
			if got, ok := fromLibService(s); ok {
				t.Errorf("fromLibService(%+v) = %+v, want it skipped", s, got)
			}
		})
	}
}
