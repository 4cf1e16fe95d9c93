package ipvs

import (
	"net/netip"
	"testing"
	"time"

	"github.com/switchyard-lb/switchyard/core/model"
)

func TestValidateService(t *testing.T) {
	key := model.VirtualServiceKey{Addr: netip.MustParseAddr("10.96.0.1"), Port: 80, Protocol: model.TCP}
	with := func(f func(*Service)) Service {
		s := Service{VirtualServiceKey: key, Scheduler: "rr"}
		f(&s)
		return s
	}
	tests := []struct {
		name    string
		svc     Service
		wantErr bool
	}{
		{name: "plain", svc: with(func(*Service) {})},
		{name: "persistent", svc: with(func(s *Service) { s.Flags, s.Persistence = FlagPersistent, time.Hour })},
		{name: "no address", svc: with(func(s *Service) { s.Addr = netip.Addr{} }), wantErr: true},
		{name: "4in6 address", svc: with(func(s *Service) { s.Addr = netip.MustParseAddr("::ffff:10.96.0.1") }), wantErr: true},
		{name: "no protocol", svc: with(func(s *Service) { s.Protocol = 0 }), wantErr: true},
		{name: "port 0", svc: with(func(s *Service) { s.Port = 0 }), wantErr: true},
		{name: "no scheduler", svc: with(func(s *Service) { s.Scheduler = "" }), wantErr: true},
		{name: "unknown flag", svc: with(func(s *Service) { s.Flags = 0x2 }), wantErr: true},
		{name: "persistence without flag", svc: with(func(s *Service) { s.Persistence = time.Hour }), wantErr: true},
		{name: "flag without persistence", svc: with(func(s *Service) { s.Flags = FlagPersistent }), wantErr: true},
		{name: "sub-second persistence", svc: with(func(s *Service) { s.Flags, s.Persistence = FlagPersistent, 1500*time.Millisecond }), wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := ValidateService(tc.svc); (err != nil) != tc.wantErr {
				t.Errorf("ValidateService(%+v) = %v, want error: %t", tc.svc, err, tc.wantErr)
			}
		})
	}
}

func TestValidateDestination(t *testing.T) {
	v4 := model.VirtualServiceKey{Addr: netip.MustParseAddr("10.96.0.1"), Port: 80, Protocol: model.TCP}
	dst := func(addr string, port uint16) Destination {
		return Destination{DestinationKey: DestinationKey{Addr: netip.MustParseAddr(addr), Port: port}}
	}
	tests := []struct {
		name    string
		d       Destination
		wantErr bool
	}{
		{name: "same family", d: dst("10.244.1.2", 8080)},
		{name: "other family", d: dst("fd00::2", 8080), wantErr: true},
		{name: "port 0", d: dst("10.244.1.2", 0), wantErr: true},
		{name: "no address", d: Destination{}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := ValidateDestination(v4, tc.d); (err != nil) != tc.wantErr {
				t.Errorf("ValidateDestination(%+v) = %v, want error: %t", tc.d, err, tc.wantErr)
			}
		})
	}
}

func TestValidateTimeouts(t *testing.T) {
	tests := []struct {
		name    string
		t       Timeouts
		wantErr bool
	}{
		{name: "zero", t: Timeouts{}},
		{name: "whole seconds", t: Timeouts{TCP: 2 * time.Hour, TCPFin: time.Minute, UDP: 5 * time.Second}},
		{name: "the kernel's limit", t: Timeouts{TCP: maxTimeout}},
		{name: "past the kernel's limit", t: Timeouts{UDP: maxTimeout + time.Second}, wantErr: true},
		{name: "sub-second", t: Timeouts{TCPFin: 1500 * time.Millisecond}, wantErr: true},
		{name: "negative", t: Timeouts{TCP: -time.Second}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := ValidateTimeouts(tc.t); (err != nil) != tc.wantErr {
				t.Errorf("ValidateTimeouts(%+v) = %v, want error: %t", tc.t, err, tc.wantErr)
			}
		})
	}
}
