package ipvs_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/ipvs"
)

var (
	vipA   = netip.MustParseAddr("10.96.0.10")
	vipB   = netip.MustParseAddr("10.96.0.11")
	nodeIP = netip.MustParseAddr("192.168.1.5")
	keyA   = model.VirtualServiceKey{Addr: vipA, Port: 80, Protocol: model.TCP}
	keyA53 = model.VirtualServiceKey{Addr: vipA, Port: 53, Protocol: model.UDP}
	keyB   = model.VirtualServiceKey{Addr: vipB, Port: 80, Protocol: model.TCP}
	keyNP  = model.VirtualServiceKey{Addr: nodeIP, Port: 30080, Protocol: model.TCP}
	keyFor = model.VirtualServiceKey{Addr: netip.MustParseAddr("172.16.0.1"), Port: 80, Protocol: model.TCP}
)

// cmpAddrs compares addresses by value, treating nil and empty slices alike.
var cmpAddrs = cmp.Options{cmpopts.EquateComparable(netip.Addr{}), cmpopts.EquateEmpty()}

func dst(addr string, w uint32) ipvs.Destination {
	return ipvs.Destination{DestinationKey: ipvs.DestinationKey{Addr: netip.MustParseAddr(addr), Port: 8080}, Weight: w}
}

func dstState(addr string, w, active, inactive uint32) ipvs.DestinationState {
	return ipvs.DestinationState{Destination: dst(addr, w), ActiveConns: active, InactiveConns: inactive}
}

func rr(k model.VirtualServiceKey) ipvs.Service {
	return ipvs.Service{VirtualServiceKey: k, Scheduler: "rr"}
}

func keyOnly(k model.VirtualServiceKey) ipvs.Service { return ipvs.Service{VirtualServiceKey: k} }

func addrs(as ...netip.Addr) map[netip.Addr]bool {
	m := map[netip.Addr]bool{}
	for _, a := range as {
		m[a] = true
	}
	return m
}

func TestDiff(t *testing.T) {
	wantA := ipvs.Desired{
		Services: map[model.VirtualServiceKey]ipvs.DesiredService{
			keyA: {Service: rr(keyA), Destinations: []ipvs.Destination{dst("10.244.1.2", 1), dst("10.244.2.2", 1)}},
		},
		Addrs: addrs(vipA),
	}
	haveA := ipvs.State{
		Services: map[model.VirtualServiceKey]ipvs.Entry{
			keyA: {Service: rr(keyA), Destinations: []ipvs.DestinationState{dstState("10.244.1.2", 1, 3, 4), dstState("10.244.2.2", 1, 0, 0)}},
		},
		Addrs: addrs(vipA),
	}
	foreign := ipvs.Entry{Service: rr(keyFor), Destinations: []ipvs.DestinationState{dstState("10.0.0.1", 1, 0, 0)}}
	all := ipvs.Scope{All: true}

	tests := []struct {
		name  string
		want  ipvs.Desired
		have  ipvs.State
		scope ipvs.Scope
		ops   []ipvs.Op
	}{
		{
			name: "empty kernel: bind, add service, add destinations", want: wantA, scope: all,
			ops: []ipvs.Op{
				{Kind: ipvs.OpBindAddr, Addr: vipA},
				{Kind: ipvs.OpAddService, Service: rr(keyA)},
				{Kind: ipvs.OpAddDestination, Service: keyOnly(keyA), Dest: dst("10.244.1.2", 1)},
				{Kind: ipvs.OpAddDestination, Service: keyOnly(keyA), Dest: dst("10.244.2.2", 1)},
			},
		},
		{name: "unchanged: nothing, connection counts ignored", want: wantA, have: haveA, scope: all},
		{
			name: "weight and scheduler change",
			want: ipvs.Desired{
				Services: map[model.VirtualServiceKey]ipvs.DesiredService{
					keyA: {Service: ipvs.Service{VirtualServiceKey: keyA, Scheduler: "wrr"}, Destinations: []ipvs.Destination{dst("10.244.1.2", 3), dst("10.244.2.2", 1)}},
				},
				Addrs: addrs(vipA),
			},
			have: haveA, scope: all,
			ops: []ipvs.Op{
				{Kind: ipvs.OpUpdateService, Service: ipvs.Service{VirtualServiceKey: keyA, Scheduler: "wrr"}},
				{Kind: ipvs.OpUpdateDestination, Service: keyOnly(keyA), Dest: dst("10.244.1.2", 3)},
			},
		},
		{
			name: "removed destination is drained, not deleted",
			want: ipvs.Desired{
				Services: map[model.VirtualServiceKey]ipvs.DesiredService{
					keyA: {Service: rr(keyA), Destinations: []ipvs.Destination{dst("10.244.2.2", 1), dst("10.244.3.2", 1)}},
				},
				Addrs: addrs(vipA),
			},
			have: haveA, scope: all,
			ops: []ipvs.Op{
				{Kind: ipvs.OpAddDestination, Service: keyOnly(keyA), Dest: dst("10.244.3.2", 1)},
				{Kind: ipvs.OpDrainDestination, Service: keyOnly(keyA), Dest: dst("10.244.1.2", 1)},
			},
		},
		{
			name: "a draining destination wanted again gets its weight back",
			want: wantA,
			have: ipvs.State{
				Services: map[model.VirtualServiceKey]ipvs.Entry{
					keyA: {Service: rr(keyA), Destinations: []ipvs.DestinationState{dstState("10.244.1.2", 0, 3, 0), dstState("10.244.2.2", 1, 0, 0)}},
				},
				Addrs: addrs(vipA),
			},
			scope: all,
			ops:   []ipvs.Op{{Kind: ipvs.OpUpdateDestination, Service: keyOnly(keyA), Dest: dst("10.244.1.2", 1)}},
		},
		{
			name: "full: owned services go, foreign ones stay",
			want: ipvs.Desired{},
			have: ipvs.State{
				Services: map[model.VirtualServiceKey]ipvs.Entry{
					keyA:   haveA.Services[keyA],
					keyNP:  {Service: rr(keyNP)},
					keyFor: foreign,
				},
				Addrs:    addrs(vipA),
				Recorded: map[model.VirtualServiceKey]bool{keyNP: true},
			},
			scope: all,
			ops: []ipvs.Op{
				{Kind: ipvs.OpDeleteService, Service: keyOnly(keyA)},
				{Kind: ipvs.OpDeleteService, Service: keyOnly(keyNP)},
				{Kind: ipvs.OpUnbindAddr, Addr: vipA},
			},
		},
		{
			name:  "a NodePort service left by an earlier run is not ours without a record",
			want:  ipvs.Desired{},
			have:  ipvs.State{Services: map[model.VirtualServiceKey]ipvs.Entry{keyNP: {Service: rr(keyNP)}}},
			scope: all,
		},
		{
			name: "foreign service the plan wants is adopted",
			want: ipvs.Desired{Services: map[model.VirtualServiceKey]ipvs.DesiredService{
				keyFor: {Service: ipvs.Service{VirtualServiceKey: keyFor, Scheduler: "mh", Flags: ipvs.FlagSchedOpt2}, Destinations: []ipvs.Destination{dst("10.0.0.1", 1)}},
			}},
			have:  ipvs.State{Services: map[model.VirtualServiceKey]ipvs.Entry{keyFor: foreign}},
			scope: all,
			ops:   []ipvs.Op{{Kind: ipvs.OpUpdateService, Service: ipvs.Service{VirtualServiceKey: keyFor, Scheduler: "mh", Flags: ipvs.FlagSchedOpt2}}},
		},
		{
			name: "incremental: only the scope is touched",
			want: ipvs.Desired{
				Services: map[model.VirtualServiceKey]ipvs.DesiredService{
					keyA53: {Service: rr(keyA53), Destinations: []ipvs.Destination{dst("10.244.1.2", 1)}},
				},
				Addrs: addrs(vipA),
			},
			have: ipvs.State{
				Services: map[model.VirtualServiceKey]ipvs.Entry{keyA: haveA.Services[keyA], keyB: {Service: rr(keyB)}},
				Addrs:    addrs(vipA, vipB),
			},
			scope: ipvs.Scope{Keys: []model.VirtualServiceKey{keyA53, keyB}, Addrs: []netip.Addr{vipA, vipB}},
			ops: []ipvs.Op{
				{Kind: ipvs.OpAddService, Service: rr(keyA53)},
				{Kind: ipvs.OpAddDestination, Service: keyOnly(keyA53), Dest: dst("10.244.1.2", 1)},
				{Kind: ipvs.OpDeleteService, Service: keyOnly(keyB)},
				{Kind: ipvs.OpUnbindAddr, Addr: vipB},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ipvs.Diff(tc.want, tc.have, tc.scope)
			if diff := cmp.Diff(tc.ops, got, cmpAddrs); diff != "" {
				t.Errorf("ops (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFromModel(t *testing.T) {
	tests := []struct {
		name    string
		vs      model.VirtualService
		want    ipvs.DesiredService
		wantErr bool
	}{
		{
			name: "default scheduler, destinations sorted",
			vs: model.VirtualService{VirtualServiceKey: keyA, Destinations: []model.Destination{
				{Addr: netip.MustParseAddr("10.244.2.2"), Port: 8080, Weight: 1},
				{Addr: netip.MustParseAddr("10.244.1.2"), Port: 8080, Weight: 2},
			}},
			want: ipvs.DesiredService{Service: rr(keyA), Destinations: []ipvs.Destination{dst("10.244.1.2", 2), dst("10.244.2.2", 1)}},
		},
		{
			name: "mh with its flags",
			vs:   model.VirtualService{VirtualServiceKey: keyA, Scheduler: "mh", Flags: []string{"mh-port", "mh-fallback"}},
			want: ipvs.DesiredService{Service: ipvs.Service{VirtualServiceKey: keyA, Scheduler: "mh", Flags: ipvs.FlagSchedOpt1 | ipvs.FlagSchedOpt2}, Destinations: []ipvs.Destination{}},
		},
		{
			name: "affinity is persistence, rounded up to seconds",
			vs:   model.VirtualService{VirtualServiceKey: keyA, Scheduler: "wrr", AffinityTimeout: 10800*time.Second - time.Millisecond},
			want: ipvs.DesiredService{Service: ipvs.Service{VirtualServiceKey: keyA, Scheduler: "wrr", Flags: ipvs.FlagPersistent, Persistence: 3 * time.Hour}, Destinations: []ipvs.Destination{}},
		},
		{name: "unknown flag", vs: model.VirtualService{VirtualServiceKey: keyA, Flags: []string{"bogus"}}, wantErr: true},
		{
			name: "destination of the other family",
			vs: model.VirtualService{VirtualServiceKey: keyA, Destinations: []model.Destination{
				{Addr: netip.MustParseAddr("fd00::1"), Port: 8080, Weight: 1},
			}},
			wantErr: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ipvs.FromModel(tc.vs, "rr")
			if (err != nil) != tc.wantErr {
				t.Fatalf("FromModel error = %v, want error %t", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tc.want, got, cmpAddrs); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestUDPFlushes(t *testing.T) {
	keyNP53 := model.VirtualServiceKey{Addr: nodeIP, Port: 30053, Protocol: model.UDP}
	want := func(ks ...model.VirtualServiceKey) ipvs.Desired {
		d := ipvs.Desired{Services: map[model.VirtualServiceKey]ipvs.DesiredService{}}
		for _, k := range ks {
			d.Services[k] = ipvs.DesiredService{Service: rr(k), Destinations: []ipvs.Destination{dst("10.244.1.2", 1)}}
		}
		return d
	}
	have := func(entries map[model.VirtualServiceKey][]ipvs.DestinationState) ipvs.State {
		s := ipvs.State{Services: map[model.VirtualServiceKey]ipvs.Entry{}}
		for k, ds := range entries {
			s.Services[k] = ipvs.Entry{Service: rr(k), Destinations: ds}
		}
		return s
	}
	all := ipvs.Scope{All: true}
	tests := []struct {
		name  string
		want  ipvs.Desired
		have  ipvs.State
		scope ipvs.Scope
		out   []model.VirtualServiceKey
	}{
		{name: "a new UDP service with real servers", want: want(keyA53, keyNP53), have: have(nil), scope: all, out: []model.VirtualServiceKey{keyA53, keyNP53}},
		{
			name: "from no real servers to some", want: want(keyA53), scope: all, out: []model.VirtualServiceKey{keyA53},
			have: have(map[model.VirtualServiceKey][]ipvs.DestinationState{keyA53: nil}),
		},
		{
			name: "from draining ones only to a serving one", want: want(keyA53), scope: all, out: []model.VirtualServiceKey{keyA53},
			have: have(map[model.VirtualServiceKey][]ipvs.DestinationState{keyA53: {dstState("10.244.9.9", 0, 0, 3)}}),
		},
		{
			name: "from some to others", want: want(keyA53), scope: all,
			have: have(map[model.VirtualServiceKey][]ipvs.DestinationState{keyA53: {dstState("10.244.9.9", 1, 0, 3)}}),
		},
		{
			name: "to real servers at weight 0 only", scope: all,
			want: ipvs.Desired{Services: map[model.VirtualServiceKey]ipvs.DesiredService{
				keyA53: {Service: rr(keyA53), Destinations: []ipvs.Destination{dst("10.244.1.2", 0)}},
			}},
			have: have(map[model.VirtualServiceKey][]ipvs.DestinationState{keyA53: nil}),
		},
		{
			name: "still no real servers", scope: all,
			want: ipvs.Desired{Services: map[model.VirtualServiceKey]ipvs.DesiredService{keyA53: {Service: rr(keyA53)}}},
			have: have(map[model.VirtualServiceKey][]ipvs.DestinationState{keyA53: nil}),
		},
		{name: "TCP is left alone", want: want(keyA), have: have(nil), scope: all},
		{name: "outside the scope", want: want(keyA53), have: have(nil), scope: ipvs.Scope{Keys: []model.VirtualServiceKey{keyA}}},
		{name: "in the scope", want: want(keyA53), have: have(nil), scope: ipvs.Scope{Keys: []model.VirtualServiceKey{keyA53, keyA53}}, out: []model.VirtualServiceKey{keyA53}},
		{name: "deleted", want: want(), have: have(map[model.VirtualServiceKey][]ipvs.DestinationState{keyA53: nil}), scope: ipvs.Scope{Keys: []model.VirtualServiceKey{keyA53}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.out, ipvs.UDPFlushes(tt.want, tt.have, tt.scope), cmpAddrs); diff != "" {
				t.Errorf("UDPFlushes (-want +got):\n%s", diff)
			}
		})
	}
}
