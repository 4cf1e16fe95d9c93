package model

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestReadyPerNode(t *testing.T) {
	ep := func(addr, node string, ready bool, port uint16) Endpoint {
		return Endpoint{Addr: netip.MustParseAddr(addr), NodeName: node, Ready: ready, Serving: ready, Port: port}
	}
	tests := []struct {
		name string
		eps  []Endpoint
		want map[string]int
	}{
		{"none", nil, nil},
		{"ready endpoints by node", []Endpoint{
			ep("10.0.0.1", "a", true, 80), ep("10.0.0.2", "a", true, 80), ep("10.0.0.3", "b", true, 80),
		}, map[string]int{"a": 2, "b": 1}},
		{"an address counts once over its ports", []Endpoint{
			ep("10.0.0.1", "a", true, 80), ep("10.0.0.1", "a", true, 443),
		}, map[string]int{"a": 1}},
		{"not ready (terminating, serving or not) and nodeless endpoints count nowhere", []Endpoint{
			ep("10.0.0.1", "a", false, 80),
			{Addr: netip.MustParseAddr("10.0.0.2"), NodeName: "a", Serving: true, Terminating: true},
			ep("10.0.0.3", "", true, 80),
			ep("10.0.0.4", "b", true, 80),
		}, map[string]int{"b": 1}},
		{"dual-stack: the family with more, not the sum", []Endpoint{
			ep("10.0.0.1", "a", true, 80), ep("fd00::1", "a", true, 80), ep("fd00::2", "a", true, 80),
		}, map[string]int{"a": 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, ReadyPerNode(tt.eps)); diff != "" {
				t.Errorf("ReadyPerNode (-want +got):\n%s", diff)
			}
		})
	}
}
