package ipvstest_test

import (
	"errors"
	"net/netip"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/ipvs/ipvstest"
)

func key(i int) model.VirtualServiceKey {
	return model.VirtualServiceKey{Addr: netip.AddrFrom4([4]byte{10, 96, 0, byte(i)}), Port: 80, Protocol: model.TCP}
}

func dest(i int, weight uint32) ipvs.Destination {
	return ipvs.Destination{DestinationKey: ipvs.DestinationKey{Addr: netip.AddrFrom4([4]byte{10, 244, 0, byte(i)}), Port: 8080}, Weight: weight}
}

// TestFakeConcurrentUse is meant for -race: writers and readers at once.
func TestFakeConcurrentUse(t *testing.T) {
	f := ipvstest.NewFake()
	const n = 32
	var wg sync.WaitGroup
	errs := make(chan error, 4*n)
	for i := range n {
		wg.Add(2)
		go func() {
			defer wg.Done()
			k := key(i)
			errs <- f.AddService(ipvs.Service{VirtualServiceKey: k, Scheduler: "rr"})
			errs <- f.AddDestination(k, dest(1, 1))
			errs <- f.UpdateDestination(k, dest(1, uint32(i)))
		}()
		go func() {
			defer wg.Done()
			_, err := f.Services()
			errs <- err
			f.Table()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	table := f.Table()
	if len(table) != n {
		t.Fatalf("table has %d services, want %d", len(table), n)
	}
	for i, e := range table {
		want := []ipvs.DestinationState{{Destination: dest(1, uint32(i))}}
		if diff := cmp.Diff(want, e.Destinations, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
			t.Errorf("service %d destinations (-want +got):\n%s", i, diff)
		}
	}
	if got := f.Calls(ipvstest.OpAddService); got != n {
		t.Errorf("Calls(AddService) = %d, want %d", got, n)
	}
}

func TestFakeSetError(t *testing.T) {
	f := ipvstest.NewFake()
	boom := errors.New("netlink: boom")
	f.SetError(ipvstest.OpAddService, boom)
	if err := f.AddService(ipvs.Service{VirtualServiceKey: key(1), Scheduler: "rr"}); !errors.Is(err, boom) {
		t.Fatalf("AddService error = %v, want %v", err, boom)
	}
	if got := f.Table(); len(got) != 0 {
		t.Fatalf("a failed AddService changed the table: %v", got)
	}
	f.SetError(ipvstest.OpAddService, nil)
	if err := f.AddService(ipvs.Service{VirtualServiceKey: key(1), Scheduler: "rr"}); err != nil {
		t.Fatalf("AddService after clearing the error: %v", err)
	}
	if got := f.Calls(ipvstest.OpAddService); got != 2 {
		t.Errorf("Calls(AddService) = %d, want 2", got)
	}
}

func TestFakeSetConns(t *testing.T) {
	f := ipvstest.NewFake()
	k := key(1)
	if err := f.AddService(ipvs.Service{VirtualServiceKey: k, Scheduler: "rr"}); err != nil {
		t.Fatal(err)
	}
	if err := f.AddDestination(k, dest(1, 0)); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		k       model.VirtualServiceKey
		d       ipvs.DestinationKey
		wantErr error
	}{
		{name: "known destination", k: k, d: dest(1, 0).DestinationKey},
		{name: "unknown destination", k: k, d: dest(2, 0).DestinationKey, wantErr: ipvs.ErrNotFound},
		{name: "unknown service", k: key(2), d: dest(1, 0).DestinationKey, wantErr: ipvs.ErrNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := f.SetConns(tc.k, tc.d, 3, 4); !errors.Is(err, tc.wantErr) {
				t.Fatalf("SetConns error = %v, want %v", err, tc.wantErr)
			}
		})
	}
	got, err := f.Destinations(k)
	if err != nil {
		t.Fatal(err)
	}
	want := []ipvs.DestinationState{{Destination: dest(1, 0), ActiveConns: 3, InactiveConns: 4}}
	if diff := cmp.Diff(want, got, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
		t.Errorf("destinations (-want +got):\n%s", diff)
	}
	// Table is a copy: changing it does not change the fake.
	f.Table()[0].Destinations[0].Weight = 9
	if got, _ := f.Destinations(k); got[0].Weight != 0 {
		t.Error("Table returned the fake's own slice")
	}
}

// TestFakeSkipInDump checks the model of the kernel's inexact listings:
// the next Services dump, and only it, leaves the keys out, as does the
// next table read; the exact lookup still finds them.
func TestFakeSkipInDump(t *testing.T) {
	f := ipvstest.NewFake()
	svc := func(i int) ipvs.Service { return ipvs.Service{VirtualServiceKey: key(i), Scheduler: "rr"} }
	for i := range 3 {
		if err := f.AddService(svc(i)); err != nil {
			t.Fatal(err)
		}
	}
	opts := cmpopts.EquateComparable(netip.Addr{})
	f.SkipInDump(key(1))
	for _, want := range [][]ipvs.Service{{svc(0), svc(2)}, {svc(0), svc(1), svc(2)}} {
		got, err := f.Services()
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got, opts); diff != "" {
			t.Errorf("dump (-want +got):\n%s", diff)
		}
	}
	f.SkipInDump(key(1))
	for _, want := range []int{2, 3} {
		if table, err := f.ReadTable(); err != nil || len(table) != want {
			t.Errorf("ReadTable = %d services, %v; want %d", len(table), err, want)
		}
	}
	if s, err := f.Service(key(1)); err != nil || s != svc(1) {
		t.Errorf("Service(key 1) = %v, %v; want %v", s, err, svc(1))
	}
	if _, err := f.Service(key(9)); !errors.Is(err, ipvs.ErrNotFound) {
		t.Errorf("Service(missing) error = %v, want ErrNotFound", err)
	}
}
