package builtin_test

import (
	"context"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/plugins/builtin"
)

// ep describes a test endpoint compactly.
type ep struct {
	ready, serving, terminating bool
	local, sameZone             bool
	hints                       []string
}

var (
	ready       = ep{ready: true, serving: true}
	readyLocal  = ep{ready: true, serving: true, local: true, sameZone: true}
	readyZone   = ep{ready: true, serving: true, sameZone: true}
	terminating = ep{serving: true, terminating: true}
	notReady    = ep{}
)

func hinted(e ep, zones ...string) ep { e.hints = zones; return e }

func input(zone string, eps ...ep) *plugin.PolicyInput {
	in := &plugin.PolicyInput{
		Service: &model.Service{Key: model.ServiceKey{Namespace: "ns", Name: "s"}},
		Node:    &model.Node{Name: "n1", Zone: zone},
	}
	for i, e := range eps {
		in.Endpoints = append(in.Endpoints, plugin.PolicyEndpoint{
			Endpoint: model.Endpoint{
				Addr: netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}), Port: 80,
				Ready: e.ready, Serving: e.serving, Terminating: e.terminating, HintZones: e.hints,
			},
			Local: e.local, SameZone: e.sameZone,
		})
	}
	return in
}

func TestPolicies(t *testing.T) {
	tests := []struct {
		policy string
		name   string
		in     *plugin.PolicyInput
		want   []uint32
	}{
		{"uniform", "no endpoints", input("z1"), []uint32{}},
		{"uniform", "ready ones only", input("z1", ready, notReady, readyLocal, terminating), []uint32{1, 0, 1, 0}},
		{"uniform", "terminating fallback", input("z1", notReady, terminating, terminating, ep{terminating: true}), []uint32{0, 1, 1, 0}},
		{"uniform", "nothing usable", input("z1", notReady, ep{terminating: true}), []uint32{0, 0}},

		{"local-first", "local wins", input("z1", ready, readyLocal, readyZone), []uint32{0, 1, 0}},
		{"local-first", "no local: everyone", input("z1", ready, readyZone, notReady), []uint32{1, 1, 0}},
		{"local-first", "local not ready: everyone ready", input("z1", ready, ep{local: true}), []uint32{1, 0}},
		{"local-first", "local terminating fallback", input("z1", notReady, ep{serving: true, terminating: true, local: true}, terminating), []uint32{0, 1, 0}},

		{"topology-aware", "same zone without hints", input("z1", ready, readyZone, readyLocal), []uint32{0, 1, 1}},
		{"topology-aware", "no same zone: everyone", input("z1", ready, ready), []uint32{1, 1}},
		{"topology-aware", "zone unknown: everyone", input("", ready, readyZone), []uint32{1, 1}},
		{"topology-aware", "hints followed", input("z1", hinted(ready, "z1"), hinted(readyZone, "z2"), hinted(ready, "z2", "z1")), []uint32{1, 0, 1}},
		{"topology-aware", "partial hints: same zone", input("z1", hinted(ready, "z1"), readyZone), []uint32{0, 1}},
		{"topology-aware", "no hint for my zone: everyone", input("z3", hinted(ready, "z1"), hinted(ready, "z2")), []uint32{1, 1}},
		{"topology-aware", "hints of unusable endpoints ignored", input("z1", hinted(ready, "z1"), notReady), []uint32{1, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.policy+"/"+tt.name, func(t *testing.T) {
			p, ok := builtin.Lookup(tt.policy)
			if !ok || p.Name() != tt.policy {
				t.Fatalf("Lookup(%q) = %v, %v", tt.policy, p, ok)
			}
			got, err := p.Evaluate(context.Background(), tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(plugin.PolicyResult{Weights: tt.want}, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestLookup(t *testing.T) {
	for _, name := range builtin.Names() {
		if p, ok := builtin.Lookup(name); !ok || p.Name() != name {
			t.Errorf("Lookup(%q) = %v, %v", name, p, ok)
		}
	}
	if p, ok := builtin.Lookup("random"); ok {
		t.Errorf("Lookup(random) = %v, want none", p)
	}
}
