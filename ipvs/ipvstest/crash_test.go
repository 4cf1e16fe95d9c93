package ipvstest_test

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/ipvs/ipvstest"
)

// TestCrash arms a crash after the second AddService: that call still
// runs, every later call of any wrapped object fails and changes nothing,
// and Restart brings them back.
func TestCrash(t *testing.T) {
	f, addrs, fw := ipvstest.NewFake(), ipvstest.NewFakeAddresses(), &ipvstest.FakeFirewall{}
	c := &ipvstest.Crash{}
	k, a, w := c.Kernel(f), c.Addresses(addrs), c.Firewall(fw)
	if err := a.EnsureDummy("d"); err != nil {
		t.Fatal(err)
	}
	c.After(ipvstest.OpAddService, 2)
	type call struct {
		Name    string
		Crashed bool // the call failed with ErrCrashed
		Down    bool // c.Crashed after it
	}
	var got []call
	do := func(name string, err error) {
		if err != nil && !errors.Is(err, ipvstest.ErrCrashed) {
			t.Errorf("%s: %v", name, err)
		}
		got = append(got, call{name, err != nil, c.Crashed()})
	}
	do("add 1", k.AddService(ipvs.Service{VirtualServiceKey: key(1), Scheduler: "rr"}))
	do("sync", w.Sync(ipvs.FirewallSpec{}))
	do("add 2", k.AddService(ipvs.Service{VirtualServiceKey: key(2), Scheduler: "rr"}))
	do("add 3", k.AddService(ipvs.Service{VirtualServiceKey: key(3), Scheduler: "rr"}))
	do("bind", a.AddAddr("d", netip.MustParseAddr("10.96.0.1")))
	do("record", w.RecordOwned([]model.VirtualServiceKey{key(1)}, nil))
	_, err := k.Services()
	do("list", err)
	c.Restart()
	do("add 3 after the restart", k.AddService(ipvs.Service{VirtualServiceKey: key(3), Scheduler: "rr"}))
	want := []call{
		{"add 1", false, false}, {"sync", false, false}, {"add 2", false, true}, {"add 3", true, true},
		{"bind", true, true}, {"record", true, true}, {"list", true, true}, {"add 3 after the restart", false, false},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	var keys []model.VirtualServiceKey
	for _, e := range f.Table() {
		keys = append(keys, e.Service.VirtualServiceKey)
	}
	if diff := cmp.Diff([]model.VirtualServiceKey{key(1), key(2), key(3)}, keys, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
	if bound, _ := addrs.Addrs("d"); len(bound) != 0 || fw.Writes() != 1 {
		t.Errorf("after the crash: bound %v and %d table writes, want none and 1", bound, fw.Writes())
	}
}
