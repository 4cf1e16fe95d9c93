package conformance_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/plugins/wasm/abi"
	"github.com/switchyard-lb/switchyard/wasm-sdk/go/policy"
)

// fold is the probe modules' hash (wasm-sdk/rust/testdata/probe.rs).
type fold uint32

func (h *fold) w(x uint32) { *h = fold((uint32(*h) ^ x) * 16777619) }
func (h *fold) d(x uint64) { h.w(uint32(x)); h.w(uint32(x >> 32)) }
func (h *fold) s(b []byte) {
	h.w(uint32(len(b)))
	for _, c := range b {
		h.w(uint32(c))
	}
}

func bit(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// probeReference computes the probe's weights with the Go SDK, natively,
// over the bytes the host encodes: the Go SDK's accessors are tested
// against the host in wasm-sdk/go/policy, so agreeing with it tests every
// accessor of the other SDKs.
func probeReference(t *testing.T, in *plugin.PolicyInput) []uint32 {
	t.Helper()
	b, err := abi.Encode(nil, in)
	if err != nil {
		t.Fatal(err)
	}
	v, err := policy.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	h := fold(2166136261)
	h.d(uint64(v.NowUnixNano()))
	h.s(v.Namespace())
	h.s(v.Name())
	h.s(v.PortName())
	h.w(uint32(v.Port()))
	h.w(uint32(v.Protocol()))
	h.w(uint32(v.ServiceType()))
	h.w(uint32(v.NodePort()))
	h.w(bit(v.ExternalLocal()))
	h.w(bit(v.InternalLocal()))
	h.s(v.NodeName())
	h.s(v.NodeZone())
	h.s(v.Params())
	h.s(v.TrafficDistribution())
	h.s(v.SchedulerHint())
	h.w(bit(v.SessionAffinity()))
	h.w(uint32(v.Len()))
	service := h
	w := make([]uint32, v.Len())
	for i := range v.Len() {
		e := v.Endpoint(i)
		h := service
		h.w(uint32(i))
		addr := e.Addr()
		for _, c := range addr {
			h.w(uint32(c))
		}
		h.w(uint32(e.Port()))
		h.w(uint32(e.Family()))
		h.w(e.Flags())
		h.w(bit(e.Ready()) | bit(e.Serving())<<1 | bit(e.Terminating())<<2 | bit(e.Local())<<3)
		h.w(bit(e.SameZone()) | bit(e.HintedForZone())<<1 | bit(e.HintedForNode())<<2)
		h.d(e.ID())
		age, ok := e.Age()
		if !ok {
			age = ^uint64(0)
		}
		h.d(age)
		h.w(e.ActiveConns())
		h.w(e.InactiveConns())
		h.w(e.ConnRate())
		h.d(e.BytesInRate())
		h.d(e.BytesOutRate())
		h.s(e.NodeName())
		h.s(e.Zone())
		h.s(e.HintZones())
		h.s(e.HintNodes())
		w[i] = uint32(h) & 0xffff
	}
	return w
}

// richInput sets every field the ABI carries.
func richInput() *plugin.PolicyInput {
	return &plugin.PolicyInput{
		Service: &model.Service{
			Key: model.ServiceKey{Namespace: "shop", Name: "cart"}, Type: model.LoadBalancer,
			ExternalTrafficPolicy: model.PolicyLocal, InternalTrafficPolicy: model.PolicyLocal,
			AffinityTimeout: time.Minute, TrafficDistribution: model.DistributionPreferClose, Scheduler: "sh",
		},
		Port:   model.ServicePort{Name: "grpc", Protocol: model.UDP, Port: 53, NodePort: 30053},
		Node:   &model.Node{Name: "n1", Zone: "z1"},
		Now:    now,
		Params: []byte(`{"x": [1, {"y": "ü"}]}`),
		Endpoints: []plugin.PolicyEndpoint{
			{
				Endpoint: model.Endpoint{
					Addr: netip.MustParseAddr("10.1.2.3"), Port: 5353, Protocol: model.UDP,
					NodeName: "n1", Zone: "z1", Ready: true, Serving: true,
					HintZones: []string{"z1", "z2"}, HintNodes: []string{"n1", "n2"},
				},
				Local: true, SameZone: true, FirstSeen: now.Add(-1234567891 * time.Nanosecond),
				Stats: plugin.EndpointStats{ActiveConns: 1, InactiveConns: 2, ConnRate: 3, BytesInRate: 1 << 40, BytesOutRate: 5},
			},
			{
				Endpoint: model.Endpoint{Addr: netip.MustParseAddr("2001:db8::1"), Port: 53, Protocol: model.UDP, Terminating: true, Zone: "z9"},
				Stats:    plugin.EndpointStats{ActiveConns: 1<<32 - 1, BytesOutRate: 1<<64 - 1},
			},
		},
	}
}

// TestSDKInputAccessors checks that the Rust and AssemblyScript SDKs read
// every input field as the Go SDK does.
func TestSDKInputAccessors(t *testing.T) {
	r, dir := runtime(t)
	probes := map[string]*plugin.PolicyInput{
		"every field":  richInput(),
		"no endpoints": scenario(""),
		"50 endpoints": scenario(`{"a": 1}`, many(50)...),
	}
	for _, lang := range []string{"rust", "assemblyscript"} {
		p := load(t, r, dir, lang, "probe")
		if p == nil {
			continue
		}
		for name, in := range probes {
			want := probeReference(t, in)
			got, err := p.Evaluate(context.Background(), in)
			if err != nil {
				t.Errorf("%s, %s: %v", lang, name, err)
				continue
			}
			if diff := cmp.Diff(want, got.Weights); diff != "" {
				t.Errorf("%s, %s: weights (-Go SDK +%s):\n%s", lang, name, lang, diff)
			}
		}
	}
}

// The Go SDK against the host's codec (plugins/wasm/abi): what the host
// encodes, the SDK reads; what the SDK writes, the host decodes. These
// tests live here, in the daemon's module, because the SDK's own module
// (wasm-sdk/go) depends on nothing.

// view is what the SDK reads, in comparable form.
type view struct {
	Now                                    int64
	Namespace, Name, PortName              string
	Port, NodePort                         uint16
	Protocol, Type                         uint8
	ExtLocal, IntLocal, Affinity           bool
	NodeName, NodeZone, Params, Dist, Hint string
	Endpoints                              []epView
}

type epView struct {
	Addr                                         netip.Addr
	Port                                         uint16
	Family                                       uint8
	Ready, Serving, Terminating, Local, SameZone bool
	HintZone, HintNode                           bool
	ID, Age                                      uint64
	AgeKnown                                     bool
	Active, Inactive, Rate                       uint32
	In, Out                                      uint64
	Node, Zone, HintZones, HintNodes             string
}

func read(in *policy.Input) view {
	v := view{
		Now: in.NowUnixNano(), Namespace: string(in.Namespace()), Name: string(in.Name()),
		PortName: string(in.PortName()), Port: in.Port(), NodePort: in.NodePort(),
		Protocol: in.Protocol(), Type: in.ServiceType(), ExtLocal: in.ExternalLocal(),
		IntLocal: in.InternalLocal(), Affinity: in.SessionAffinity(), NodeName: string(in.NodeName()),
		NodeZone: string(in.NodeZone()), Params: string(in.Params()),
		Dist: string(in.TrafficDistribution()), Hint: string(in.SchedulerHint()),
	}
	for i := range in.Len() {
		e := in.Endpoint(i)
		age, known := e.Age()
		v.Endpoints = append(v.Endpoints, epView{
			Addr: netip.AddrFrom16(e.Addr()).Unmap(), Port: e.Port(), Family: e.Family(),
			Ready: e.Ready(), Serving: e.Serving(), Terminating: e.Terminating(), Local: e.Local(),
			SameZone: e.SameZone(), HintZone: e.HintedForZone(), HintNode: e.HintedForNode(),
			ID: e.ID(), Age: age, AgeKnown: known, Active: e.ActiveConns(), Inactive: e.InactiveConns(),
			Rate: e.ConnRate(), In: e.BytesInRate(), Out: e.BytesOutRate(), Node: string(e.NodeName()),
			Zone: string(e.Zone()), HintZones: string(e.HintZones()), HintNodes: string(e.HintNodes()),
		})
	}
	return v
}

// TestInputReadsHostEncoding reads what the host's codec writes.
func TestInputReadsHostEncoding(t *testing.T) {
	b, err := abi.Encode(nil, richInput())
	if err != nil {
		t.Fatal(err)
	}
	in, err := policy.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	a1, a2 := netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("2001:db8::1")
	want := view{
		Now: now.UnixNano(), Namespace: "shop", Name: "cart", PortName: "grpc", Port: 53,
		NodePort: 30053, Protocol: policy.UDP, Type: policy.LoadBalancer, ExtLocal: true, IntLocal: true, Affinity: true,
		NodeName: "n1", NodeZone: "z1", Params: `{"x": [1, {"y": "ü"}]}`, Dist: "PreferClose", Hint: "sh",
		Endpoints: []epView{
			{
				Addr: a1, Port: 5353, Family: 4, Ready: true, Serving: true, Local: true, SameZone: true,
				HintZone: true, HintNode: true, ID: abi.EndpointID(a1.As16(), 5353, 2),
				Age: 1234567891, AgeKnown: true, Active: 1, Inactive: 2, Rate: 3, In: 1 << 40, Out: 5,
				Node: "n1", Zone: "z1", HintZones: "z1,z2", HintNodes: "n1,n2",
			},
			{
				Addr: a2, Port: 53, Family: 6, Terminating: true, ID: abi.EndpointID(a2.As16(), 53, 2),
				Active: 1<<32 - 1, Out: 1<<64 - 1, Zone: "z9",
			},
		},
	}
	if diff := cmp.Diff(want, read(in), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("SDK view of the host's input (-want +got):\n%s", diff)
	}
}

func TestEndpointOutOfRange(t *testing.T) {
	b, _ := abi.Encode(nil, richInput())
	in, err := policy.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{-1, in.Len()} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Endpoint(%d) of %d did not panic", i, in.Len())
				}
			}()
			in.Endpoint(i)
		}()
	}
}

func TestParseErrors(t *testing.T) {
	good, _ := abi.Encode(nil, richInput())
	mut := func(f func(b []byte)) []byte {
		b := append([]byte(nil), good...)
		f(b)
		return b
	}
	tests := []struct {
		name string
		b    []byte
		want string
	}{
		{"short", good[:4], "shorter than its header"},
		{"major", mut(func(b []byte) { b[0] = 2 }), "input ABI major version 2, want 1"},
		{"truncated", good[:len(good)-1], "bad input header"},
		{"records past end", mut(func(b []byte) { b[12] = 200 }), "bad input record table: 200 records"},
		{"small records", mut(func(b []byte) { b[20] = 8 }), "bad input record table"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := policy.Parse(tt.b)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse() error = %v, want %q", err, tt.want)
			}
		})
	}
}

// TestOutputDecodesOnHost checks that what the SDK writes is what the
// host's strict decoder reads.
func TestOutputDecodesOnHost(t *testing.T) {
	tests := []struct {
		name string
		f    policy.Func
		want plugin.PolicyResult
	}{
		{
			name: "weights only",
			f: func(in *policy.Input, out *policy.Output) error {
				out.SetWeight(0, 7)
				return nil
			},
			want: plugin.PolicyResult{Weights: []uint32{7, 0}},
		},
		{
			name: "everything",
			f: func(in *policy.Input, out *policy.Output) error {
				out.SetWeight(0, 1<<20) // capped
				out.SetWeight(1, 2)
				out.SetScheduler("mh", "mh-port", "mh-fallback")
				out.SetReevaluate(5000)
				return nil
			},
			want: plugin.PolicyResult{
				Weights: []uint32{65535, 2}, Scheduler: "mh", Flags: []string{"mh-port", "mh-fallback"},
				Reevaluate: 5 * time.Second,
			},
		},
	}
	in, _ := abi.Encode(nil, richInput())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := policy.NewEvaluator(tt.f)
			for range 2 { // the second run reuses the buffers
				out, err := e.Run(in)
				if err != nil {
					t.Fatal(err)
				}
				got, err := abi.Decode(out, 2)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestEvaluatorErrorAndAllocs(t *testing.T) {
	in, _ := abi.Encode(nil, richInput())
	boom := errors.New("boom")
	if _, err := policy.NewEvaluator(func(*policy.Input, *policy.Output) error { return boom }).Run(in); !errors.Is(err, boom) {
		t.Errorf("Run() error = %v, want boom", err)
	}
	e := policy.NewEvaluator(func(in *policy.Input, out *policy.Output) error {
		for i := range in.Len() {
			if in.Endpoint(i).Ready() && string(in.Endpoint(i).Zone()) == "z1" {
				out.SetWeight(i, 1)
			}
		}
		out.SetScheduler("sh", "sh-port")
		return nil
	})
	if _, err := e.Run(in); err != nil {
		t.Fatal(err)
	}
	if allocs := testing.AllocsPerRun(100, func() { e.Run(in) }); allocs != 0 {
		t.Errorf("Run() allocates %v times per call, want 0", allocs)
	}
}

// FuzzParse: whatever Parse accepts can be read entirely without a panic.
func FuzzParse(f *testing.F) {
	good, _ := abi.Encode(nil, richInput())
	f.Add(good)
	f.Add(good[:120])
	f.Add([]byte{1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		in, err := policy.Parse(b)
		if err != nil {
			return
		}
		read(in)
		if v, err := policy.ParamUint(in.Params(), "k", 1); err == nil && v > 1<<32-1 {
			t.Fatal("impossible")
		}
	})
}

func TestUsable(t *testing.T) {
	ep := func(ready, serving, terminating bool) plugin.PolicyEndpoint {
		return plugin.PolicyEndpoint{Endpoint: model.Endpoint{
			Addr: netip.MustParseAddr("10.0.0.1"), Port: 80, Protocol: model.TCP,
			Ready: ready, Serving: serving, Terminating: terminating,
		}}
	}
	// One Evaluator runs every case in order, as the wasm export reuses
	// its Input: what one evaluation scanned must not leak into the next.
	var got []bool
	ev := policy.NewEvaluator(func(in *policy.Input, out *policy.Output) error {
		got = nil
		for i := range in.Len() {
			got = append(got, in.Usable(i))
		}
		return nil
	})
	tests := []struct {
		name string
		eps  []plugin.PolicyEndpoint
		want []bool
	}{
		{"ready ones when some are", []plugin.PolicyEndpoint{ep(true, true, false), ep(false, true, true), ep(false, false, false)},
			[]bool{true, false, false}},
		{"serving terminating ones when none is ready", []plugin.PolicyEndpoint{ep(false, true, true), ep(false, false, true), ep(false, true, false)},
			[]bool{true, false, false}},
		{"ready again", []plugin.PolicyEndpoint{ep(false, true, true), ep(true, true, false)},
			[]bool{false, true}},
		{"none", nil, nil},
	}
	for _, tt := range tests {
		pi := richInput()
		pi.Endpoints = tt.eps
		b, err := abi.Encode(nil, pi)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ev.Run(b); err != nil {
			t.Fatalf("%s: Run: %v", tt.name, err)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s: Usable (-want +got):\n%s", tt.name, diff)
		}
	}
}
