package ipvs_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/ipvs"
)

// procIPVS is /proc/net/ip_vs as Linux 6.1 prints it.
const procIPVS = `IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port Forward Weight ActiveConn InActConn
TCP  0A600100:0050 rr 
  -> 0A400002:1F90      Masq    1      0          0         
  -> 0A400001:1F90      Masq    0      3          1         
UDP  [fd00:0010:0096:0000:0000:0000:0000:000a]:0035 rr 
  -> [fd00:0010:0244:0000:0000:0000:0000:0002]:0035      Masq    1      0          0         
FWM  00000001 wrr 
  -> 0A000001:0000      Masq    1      0          0         
TCP  0A600101:0050 sh persistent 10800 mask 255.255.255.255
SCTP 0A60000A:0BB8 rr ops 
  -> 0AF40001:0BB8      Masq    2      0          0         
FWM  00000002 rr 
  -> [fd00:0010:0244:0000:0000:0000:0000:0003]:0050      Masq    1      2          0         
FWM  00000003 rr 
FWM  00010000 rr 
  -> 0A000003:0000      Tunnel  1      0          0         
TCP  0A600102:0050 rr 
  -> 0A000004:0050      Tunnel  1      0          0         
FWM  00000004 rr 
  -> 0A000005:0000      Masq    1      0          0         
FWM  00000004 rr 
  -> 0A000006:0000      Masq    1      0          0         
FWM  00000005 rr 
  -> 0A000007:0000      Local   1      0          0         
  -> [fd00::7]:0000      Masq    1      0          0         
`

func TestParseProcTable(t *testing.T) {
	got, err := ipvs.ParseProcTable(strings.NewReader(procIPVS))
	if err != nil {
		t.Fatal(err)
	}
	a := netip.MustParseAddr
	dest := func(addr string, port uint16, weight, active, inactive uint32) ipvs.DestinationState {
		return ipvs.DestinationState{Destination: ipvs.Destination{DestinationKey: ipvs.DestinationKey{Addr: a(addr), Port: port}, Weight: weight},
			ActiveConns: active, InactiveConns: inactive}
	}
	want := map[model.VirtualServiceKey][]ipvs.DestinationState{
		{Addr: a("10.96.1.0"), Port: 80, Protocol: model.TCP}:     {dest("10.64.0.1", 8080, 0, 3, 1), dest("10.64.0.2", 8080, 1, 0, 0)},
		{Addr: a("fd00:10:96::a"), Port: 53, Protocol: model.UDP}: {dest("fd00:10:244::2", 53, 1, 0, 0)},
		{Addr: a("10.96.1.1"), Port: 80, Protocol: model.TCP}:     nil,
		{Addr: a("10.96.0.10"), Port: 3000, Protocol: model.SCTP}: {dest("10.244.0.1", 3000, 2, 0, 0)},
		// The marks whose real servers tell their family; left out: 3 (no
		// real server), 0x10000 and 10.96.1.2:80 (a tunnel), 4 (shown
		// twice), 5 (both families).
		ipvs.MarkKey(1, false): {dest("10.0.0.1", 0, 1, 0, 0)},
		ipvs.MarkKey(2, true):  {dest("fd00:10:244::3", 80, 1, 2, 0)},
	}
	if diff := cmp.Diff(want, got, cmpAddrs); diff != "" {
		t.Errorf("ParseProcTable (-want +got):\n%s", diff)
	}

	header := "IP Virtual Server version 1.2.1 (size=4096)\nProt LocalAddress:Port Scheduler Flags\n  -> RemoteAddress:Port Forward Weight ActiveConn InActConn\n"
	for _, bad := range []string{
		"TCP  0A6001:0050 rr\n",
		"TCP  0A600100 rr\n",
		"TCP\n",
		"TCP  0A600100:0050 rr\n  -> 0A400002:1F90 Masq x 0 0\n",
		"TCP  0A600100:0050 rr\n  -> 0A400002:1F90 Masq 1 0\n",
		"UDP  [fd00::zz]:0035 rr\n",
		"FWM  0000000G rr\n",
		"FWM\n",
	} {
		if _, err := ipvs.ParseProcTable(strings.NewReader(header + bad)); err == nil {
			t.Errorf("ParseProcTable accepted %q", bad)
		}
	}
}
