package abi_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/plugins/wasm/abi"
)

func BenchmarkEncode(b *testing.B) {
	for _, n := range []int{50, 1000} {
		in := testInput()
		in.Endpoints = nil
		for i := range n {
			in.Endpoints = append(in.Endpoints, plugin.PolicyEndpoint{
				Endpoint: model.Endpoint{
					Addr: netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), Port: 8080,
					NodeName: "node-1", Zone: "zone-a", Ready: true, Serving: true, HintZones: []string{"zone-a"},
				},
				FirstSeen: now,
			})
		}
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			buf, _ := abi.Encode(nil, in)
			for b.Loop() {
				buf, _ = abi.Encode(buf, in)
			}
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	for _, n := range []int{50, 1000} {
		out := abi.EncodeOutput(nil, plugin.PolicyResult{Weights: make([]uint32, n), Scheduler: "wrr"})
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			for b.Loop() {
				abi.Decode(out, n)
			}
		})
	}
}
