package ipvs_test

import (
	"errors"
	"net/netip"
	"os"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/vishvananda/netlink"

	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/ipvs/ipvstest"
	"github.com/switchyard-lb/switchyard/test/lab"
)

func TestAddressesContractFake(t *testing.T) {
	f := ipvstest.NewFakeAddresses()
	f.AddLink("lo", "device") // what every network namespace has
	testAddressesContract(t, f)
}

func TestAddressesContractNetlink(t *testing.T) {
	testAddressesContract(t, labAddresses(t))
}

// labAddresses is the real kernel's addresses, closed when t ends, with
// the contract's dummy link removed then; outside the lab guest it skips t.
func labAddresses(t *testing.T) *ipvs.NetlinkAddresses {
	t.Helper()
	if os.Getenv(lab.GuestEnv) != "1" {
		t.Skipf("guest-only: creates links in the kernel lab (%s=1); run `make test-lab`", lab.GuestEnv)
	}
	n, err := ipvs.NewNetlinkAddresses()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.Close()
		// The interface never deletes links; the test removes its own so
		// that it can run again in the same VM.
		if l, err := netlink.LinkByName(contractDummy); err == nil {
			if err := netlink.LinkDel(l); err != nil {
				t.Errorf("delete %s: %v", contractDummy, err)
			}
		}
	})
	return n
}

const contractDummy = "sy-contract0"

func testAddressesContract(t *testing.T, a ipvs.Addresses) {
	const dummy = contractDummy
	v4 := netip.MustParseAddr("10.96.8.1")
	v4b := netip.MustParseAddr("10.96.8.2")
	v6 := netip.MustParseAddr("fd00:96::8:1")

	steps := []struct {
		name    string
		do      func() error
		wantErr error        // nil, errInvalid (any error), or a sentinel
		want    []netip.Addr // addresses on dummy after the step, when not nil
	}{
		{name: "list on a missing link", do: func() error { _, err := a.Addrs(dummy); return err }, wantErr: ipvs.ErrNotFound},
		{name: "bind on a missing link", do: func() error { return a.AddAddr(dummy, v4) }, wantErr: ipvs.ErrNotFound},
		{name: "create the dummy", do: func() error { return a.EnsureDummy(dummy) }, want: []netip.Addr{}},
		{name: "create it again", do: func() error { return a.EnsureDummy(dummy) }},
		{name: "refuse a link of another type", do: func() error { return a.EnsureDummy("lo") }, wantErr: errInvalid},
		{name: "bind three", do: func() error {
			return errors.Join(a.AddAddr(dummy, v6), a.AddAddr(dummy, v4b), a.AddAddr(dummy, v4))
		}, want: []netip.Addr{v4, v4b, v6}},
		{name: "bind one again", do: func() error { return a.AddAddr(dummy, v4) }, wantErr: ipvs.ErrExists},
		{name: "bind an invalid address", do: func() error { return a.AddAddr(dummy, netip.Addr{}) }, wantErr: errInvalid},
		{name: "unbind one", do: func() error { return a.DelAddr(dummy, v4b) }, want: []netip.Addr{v4, v6}},
		{name: "unbind it again", do: func() error { return a.DelAddr(dummy, v4b) }, wantErr: ipvs.ErrNotFound},
		{name: "unbind the rest", do: func() error { return errors.Join(a.DelAddr(dummy, v4), a.DelAddr(dummy, v6)) }, want: []netip.Addr{}},
	}
	for _, st := range steps {
		checkStepErr(t, st.name, st.do(), st.wantErr)
		if st.want == nil {
			continue
		}
		got, err := a.Addrs(dummy)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if diff := cmp.Diff(st.want, got, cmpopts.EquateComparable(netip.Addr{}), cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("%s: addresses on %s (-want +got):\n%s", st.name, dummy, diff)
		}
	}
}

// TestNetlinkAddressesLinkReplaced: the link a bind looked up is kept for
// the next binds; when someone replaces it (same name, new index), the
// next bind and unbind find the new one.
func TestNetlinkAddressesLinkReplaced(t *testing.T) {
	if os.Getenv(lab.GuestEnv) != "1" {
		t.Skipf("guest-only: creates links in the kernel lab (%s=1); run `make test-lab`", lab.GuestEnv)
	}
	const name = "sy-replaced0"
	n, err := ipvs.NewNetlinkAddresses()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.Close()
		if l, err := netlink.LinkByName(name); err == nil {
			netlink.LinkDel(l)
		}
	})
	a, b := netip.MustParseAddr("10.98.0.1"), netip.MustParseAddr("10.98.0.2")
	if err := n.EnsureDummy(name); err != nil {
		t.Fatal(err)
	}
	if err := n.AddAddr(name, a); err != nil {
		t.Fatal(err)
	}
	old, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkDel(old); err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: name}}); err != nil {
		t.Fatal(err)
	}
	if err := n.AddAddr(name, b); err != nil {
		t.Fatalf("bind on the replaced link: %v", err)
	}
	got, err := n.Addrs(name)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]netip.Addr{b}, got, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
		t.Errorf("addresses of the replaced link (-want +got):\n%s", diff)
	}
	if err := n.DelAddr(name, b); err != nil {
		t.Errorf("unbind on the replaced link: %v", err)
	}
}

// BenchmarkNetlinkAddressesBind binds and unbinds an address on a dummy
// link, alternately: the address-binding part of programming a new
// virtual IP. Guest-only (the kernel lab); not part of make test.
func BenchmarkNetlinkAddressesBind(b *testing.B) {
	if os.Getenv(lab.GuestEnv) != "1" {
		b.Skipf("guest-only: creates links in the kernel lab (%s=1)", lab.GuestEnv)
	}
	const name = "sy-bench0"
	n, err := ipvs.NewNetlinkAddresses()
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	if err := n.EnsureDummy(name); err != nil {
		b.Fatal(err)
	}
	a := netip.MustParseAddr("10.98.1.1")
	i := 0
	for b.Loop() {
		i++
		op := n.AddAddr
		if i%2 == 0 {
			op = n.DelAddr
		}
		if err := op(name, a); err != nil {
			b.Fatal(err)
		}
	}
}

// Batches of addresses are part of the contract where the Addresses is an
// AddressBatcher.

func TestAddressBatchContractFake(t *testing.T) {
	testAddressBatchContract(t, ipvstest.NewFakeAddresses())
}

func TestAddressBatchContractNetlink(t *testing.T) {
	testAddressBatchContract(t, labAddresses(t))
}

func testAddressBatchContract(t *testing.T, a interface {
	ipvs.Addresses
	ipvs.AddressBatcher
}) {
	const dummy = contractDummy
	v4, v4b := netip.MustParseAddr("10.96.9.1"), netip.MustParseAddr("10.96.9.2")
	v6 := netip.MustParseAddr("fd00:96::9:1")
	missing := netip.MustParseAddr("10.96.9.99")
	// More than one message holds: 600 addresses, every 100th bound twice.
	var many, unique []netip.Addr
	var manyWant []string
	for i := range 600 {
		unique = append(unique, netip.AddrFrom4([4]byte{10, 99, byte(i >> 8), byte(i)}))
		many, manyWant = append(many, unique[i]), append(manyWant, "ok")
		if i%100 == 99 {
			many, manyWant = append(many, unique[i-50]), append(manyWant, "exists")
		}
	}
	steps := []struct {
		name   string
		unbind bool
		addrs  []netip.Addr
		want   []string     // each address's outcome
		bound  []netip.Addr // on dummy after the step, when not nil
	}{
		{name: "bind on a missing link", addrs: []netip.Addr{v4, v6}, want: []string{"not found", "not found"}},
		{name: "bind, with failures between", addrs: []netip.Addr{v4, v4b, v4, {}, v6},
			want: []string{"ok", "ok", "exists", "invalid", "ok"}, bound: []netip.Addr{v4, v4b, v6}},
		{name: "600 in one batch", addrs: many, want: manyWant},
		{name: "unbind them, and one never bound last", unbind: true, addrs: append(unique, v4, missing),
			want: append(slices.Repeat([]string{"ok"}, 601), "not found"), bound: []netip.Addr{v4b, v6}},
	}
	for i, st := range steps {
		if i == 1 {
			if err := a.EnsureDummy(dummy); err != nil {
				t.Fatal(err)
			}
		}
		var errs []error
		if st.unbind {
			errs = a.DelAddrs(dummy, st.addrs)
		} else {
			errs = a.AddAddrs(dummy, st.addrs)
		}
		got := make([]string, len(errs))
		for i, err := range errs {
			got[i] = outcome(err)
		}
		if diff := cmp.Diff(st.want, got); diff != "" {
			t.Fatalf("%s: outcomes (-want +got):\n%s\nerrors: %v", st.name, diff, errors.Join(errs...))
		}
		if st.bound == nil {
			continue
		}
		bound, err := a.Addrs(dummy)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(st.bound, bound, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
			t.Fatalf("%s: bound (-want +got):\n%s", st.name, diff)
		}
	}
}
