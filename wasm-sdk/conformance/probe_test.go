package conformance_test

import (
	"context"
	"net/netip"
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
