package abi_test

import (
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/plugins/wasm/abi"
)

var le = binary.LittleEndian

var now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func testInput() *plugin.PolicyInput {
	return &plugin.PolicyInput{
		Service: &model.Service{
			Key:                   model.ServiceKey{Namespace: "shop", Name: "cart"},
			Type:                  model.LoadBalancer,
			ExternalTrafficPolicy: model.PolicyLocal,
			AffinityTimeout:       time.Hour,
			TrafficDistribution:   model.DistributionPreferClose,
			Scheduler:             "mh",
		},
		Port:   model.ServicePort{Name: "http", Protocol: model.TCP, Port: 80, NodePort: 30080},
		Node:   &model.Node{Name: "n1", Zone: "z1"},
		Now:    now,
		Params: []byte(`{"a":1}`),
		Endpoints: []plugin.PolicyEndpoint{
			{
				Endpoint: model.Endpoint{
					Addr: netip.MustParseAddr("10.0.0.1"), Port: 8080, Protocol: model.TCP,
					NodeName: "n1", Zone: "z1", Ready: true, Serving: true,
					HintZones: []string{"z1", "z2"}, HintNodes: []string{"n1"},
				},
				Local: true, SameZone: true,
				FirstSeen: now.Add(-time.Minute),
				Stats:     plugin.EndpointStats{ActiveConns: 7, InactiveConns: 8, ConnRate: 9, BytesInRate: 1 << 40, BytesOutRate: 11},
			},
			{
				Endpoint: model.Endpoint{
					Addr: netip.MustParseAddr("fd00::2"), Port: 8443,
					Serving: true, Terminating: true,
				},
			},
		},
	}
}

func str(t *testing.T, b []byte, at int) string {
	t.Helper()
	off, n := le.Uint32(b[at:]), le.Uint32(b[at+4:])
	if int(off+n) > len(b) {
		t.Fatalf("string ref at %d: %d+%d past %d bytes", at, off, n, len(b))
	}
	return string(b[off : off+n])
}

// TestEncodeLayout reads the encoding at the literal offsets of ABI.md,
// so a wrong constant in the package fails here.
func TestEncodeLayout(t *testing.T) {
	b, err := abi.Encode(nil, testInput())
	if err != nil {
		t.Fatal(err)
	}
	type header struct {
		Major, Minor                                uint16
		HeaderSize, Total, Count, EpOff, RecSize    uint32
		StrOff, StrLen                              uint32
		Now                                         int64
		Namespace, Name, PortName                   string
		Port, NodePort                              uint16
		Proto, Type, ETP, ITP                       byte
		NodeName, NodeZone, Params, Dist, SchedHint string
		SvcFlags, Reserved                          uint32
	}
	got := header{
		Major: le.Uint16(b[0:]), Minor: le.Uint16(b[2:]), HeaderSize: le.Uint32(b[4:]),
		Total: le.Uint32(b[8:]), Count: le.Uint32(b[12:]), EpOff: le.Uint32(b[16:]),
		RecSize: le.Uint32(b[20:]), StrOff: le.Uint32(b[24:]), StrLen: le.Uint32(b[28:]),
		Now: int64(le.Uint64(b[32:])), Namespace: str(t, b, 40), Name: str(t, b, 48),
		PortName: str(t, b, 56), Port: le.Uint16(b[64:]), Proto: b[66], Type: b[67],
		NodePort: le.Uint16(b[68:]), ETP: b[70], ITP: b[71], NodeName: str(t, b, 72),
		NodeZone: str(t, b, 80), Params: str(t, b, 88), Dist: str(t, b, 96),
		SchedHint: str(t, b, 104), SvcFlags: le.Uint32(b[112:]), Reserved: le.Uint32(b[116:]),
	}
	strLen := len("shopcarthttpn1z1{\"a\":1}PreferClosemh") + len("n1z1z1,z2n1")
	want := header{
		Major: 1, Minor: 0, HeaderSize: 120, Total: uint32(len(b)), Count: 2, EpOff: 120,
		RecSize: 104, StrOff: 120 + 2*104, StrLen: uint32(strLen), Now: now.UnixNano(),
		Namespace: "shop", Name: "cart", PortName: "http", Port: 80, Proto: 1, Type: 3,
		NodePort: 30080, ETP: 1, ITP: 0, NodeName: "n1", NodeZone: "z1", Params: `{"a":1}`,
		Dist: "PreferClose", SchedHint: "mh", SvcFlags: 1,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("header (-want +got):\n%s", diff)
	}
	if len(b) != 120+2*104+strLen {
		t.Errorf("len = %d, want %d", len(b), 120+2*104+strLen)
	}

	type record struct {
		Addr                             netip.Addr
		Port                             uint16
		Family, Proto                    byte
		Flags                            uint32
		ID, Age                          uint64
		Active, Inactive, Rate, Reserved uint32
		In, Out                          uint64
		Node, Zone, HintZones, HintNodes string
	}
	rec := func(i int) record {
		r := b[120+i*104:]
		return record{
			Addr: netip.AddrFrom16([16]byte(r[0:16])).Unmap(), Port: le.Uint16(r[16:]),
			Family: r[18], Proto: r[19], Flags: le.Uint32(r[20:]), ID: le.Uint64(r[24:]),
			Age: le.Uint64(r[32:]), Active: le.Uint32(r[40:]), Inactive: le.Uint32(r[44:]),
			Rate: le.Uint32(r[48:]), Reserved: le.Uint32(r[52:]), In: le.Uint64(r[56:]),
			Out: le.Uint64(r[64:]), Node: str(t, b, 120+i*104+72), Zone: str(t, b, 120+i*104+80),
			HintZones: str(t, b, 120+i*104+88), HintNodes: str(t, b, 120+i*104+96),
		}
	}
	wantRecs := []record{
		{
			Addr: netip.MustParseAddr("10.0.0.1"), Port: 8080, Family: 4, Proto: 1,
			Flags: 1 | 2 | 8 | 16 | 32 | 64 | 128,
			ID:    abi.EndpointID(netip.MustParseAddr("10.0.0.1").As16(), 8080, 1),
			Age:   uint64(time.Minute), Active: 7, Inactive: 8, Rate: 9, In: 1 << 40, Out: 11,
			Node: "n1", Zone: "z1", HintZones: "z1,z2", HintNodes: "n1",
		},
		{
			Addr: netip.MustParseAddr("fd00::2"), Port: 8443, Family: 6, Proto: 1, Flags: 2 | 4,
			ID: abi.EndpointID(netip.MustParseAddr("fd00::2").As16(), 8443, 1),
		},
	}
	if diff := cmp.Diff(wantRecs, []record{rec(0), rec(1)}, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
}

func TestEndpointIDStable(t *testing.T) {
	// FNV-1a 64 of 16 zero bytes, port 0 and protocol 0, computed by hand
	// from the FNV definition: a change of algorithm breaks built modules.
	h := uint64(14695981039346656037)
	for range 19 {
		h *= 1099511628211
	}
	if got := abi.EndpointID([16]byte{}, 0, 0); got != h {
		t.Errorf("EndpointID(zero) = %#x, want %#x", got, h)
	}
	a := abi.EndpointID(netip.MustParseAddr("10.0.0.1").As16(), 80, 1)
	if b := abi.EndpointID(netip.MustParseAddr("10.0.0.1").As16(), 81, 1); a == b {
		t.Error("ports 80 and 81 share an id")
	}
}

func TestEncodeReusesBuffer(t *testing.T) {
	in := testInput()
	buf, err := abi.Encode(nil, in)
	if err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		buf, err = abi.Encode(buf, in)
	})
	if err != nil || allocs != 0 {
		t.Errorf("re-encode: %v allocations, err %v; want 0, nil", allocs, err)
	}
	// A smaller input after a larger one leaves no stale bytes behind.
	small := testInput()
	small.Endpoints = small.Endpoints[1:]
	got, err := abi.Encode(buf, small)
	if err != nil {
		t.Fatal(err)
	}
	fresh, _ := abi.Encode(nil, small)
	if diff := cmp.Diff(fresh, got); diff != "" {
		t.Errorf("reused encode differs from fresh (-want +got):\n%s", diff)
	}
}

func TestEncodeErrors(t *testing.T) {
	many := testInput()
	many.Endpoints = make([]plugin.PolicyEndpoint, abi.MaxEndpoints+1)
	noAddr := testInput()
	noAddr.Endpoints[1].Addr = netip.Addr{}
	huge := testInput()
	huge.Params = make([]byte, abi.MaxInputSize)
	tests := []struct {
		name string
		in   *plugin.PolicyInput
		want string
	}{
		{"nil input", nil, "no service"},
		{"no service", &plugin.PolicyInput{}, "no service"},
		{"too many endpoints", many, "10001 endpoints, limit 10000"},
		{"endpoint without address", noAddr, "endpoint 1 has no address"},
		{"too large", huge, "limit 8388608"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := abi.Encode(nil, tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Encode() error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}
