//go:build linux

package ipvs_test

import (
	"errors"
	"net/netip"
	"os"
	"runtime"
	"testing"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/test/lab"
)

// inNewNetNS moves the calling goroutine, locked to its thread for
// good (the thread dies with it), into a new network namespace, where
// nftables can be written on the host's kernel without touching the
// host's tables. It skips tb without the privilege.
func inNewNetNS(tb testing.TB) {
	tb.Helper()
	runtime.LockOSThread() // never unlocked: the thread leaves with the goroutine
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		if errors.Is(err, unix.EPERM) || os.Geteuid() != 0 {
			tb.Skipf("needs CAP_SYS_ADMIN for a network namespace: %v", err)
		}
		tb.Fatalf("unshare the network namespace: %v", err)
	}
}

// benchFirewallSpec is the spec of n ClusterIP Services with ten
// endpoints each, as benchPlan's.
func benchFirewallSpec(n int) ipvs.FirewallSpec {
	var spec ipvs.FirewallSpec
	for i := range n {
		spec.ClusterIPs = append(spec.ClusterIPs, netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)}))
		for j := range 10 {
			spec.Endpoints = append(spec.Endpoints, netip.AddrFrom4([4]byte{10, byte(100 + j), byte(i >> 8), byte(i)}))
		}
		spec.Owned = append(spec.Owned, model.VirtualServiceKey{Addr: netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)}), Port: 80, Protocol: model.TCP})
	}
	return spec
}

// tableOf10k returns an NFTables in a fresh network namespace (see
// inNewNetNS) holding the table of 10,000 Services, and that spec.
func tableOf10k(tb testing.TB) (*ipvs.NFTables, ipvs.FirewallSpec) {
	tb.Helper()
	inNewNetNS(tb)
	fw := ipvs.NewNFTables()
	tb.Cleanup(func() { fw.Close() })
	spec := benchFirewallSpec(10000)
	if err := fw.Sync(spec); err != nil {
		tb.Fatal(err)
	}
	return fw, spec
}

// BenchmarkNFTablesUpdateOneEndpoint is the table's part of one endpoint
// change at 10,000 Services on the host's kernel, in a fresh network
// namespace: one endpoint leaves the hairpin set, another joins, and the
// stamp changes, in one transaction. Needs root (skipped otherwise); not
// part of make test (benchmarks only run with -bench).
func BenchmarkNFTablesUpdateOneEndpoint(b *testing.B) {
	fw, spec := tableOf10k(b)
	from := spec.Stamp()
	a, c := netip.MustParseAddr("10.250.0.1"), netip.MustParseAddr("10.250.0.2")
	i := 0
	for b.Loop() {
		i++
		to := "bench-" + string(rune('a'+i%2))
		d := ipvs.FirewallDelta{From: from, To: to,
			Add: ipvs.FirewallSpec{Endpoints: []netip.Addr{a}}, Remove: ipvs.FirewallSpec{Endpoints: []netip.Addr{c}}}
		if i == 1 {
			d.Remove = ipvs.FirewallSpec{} // c is not in the table yet
		}
		if err := fw.Update(d); err != nil {
			b.Fatal(err)
		}
		from, a, c = to, c, a
	}
}

// BenchmarkNFTablesRecordOwned records one owned key and drops it again,
// alternately, in a table of 10,000 Services (as above).
func BenchmarkNFTablesRecordOwned(b *testing.B) {
	fw, _ := tableOf10k(b)
	k := []model.VirtualServiceKey{{Addr: netip.MustParseAddr("192.0.2.1"), Port: 30080, Protocol: model.TCP}}
	i := 0
	for b.Loop() {
		i++
		var err error
		if i%2 == 1 {
			err = fw.RecordOwned(k, nil)
		} else {
			err = fw.RecordOwned(nil, k)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNFTablesLoad reads a table of 10,000 Services back: a
// periodic resync's part.
func BenchmarkNFTablesLoad(b *testing.B) {
	fw, _ := tableOf10k(b)
	for b.Loop() {
		st, err := fw.Load()
		if err != nil {
			b.Fatal(err)
		}
		if len(st.Owned) != 10000 {
			b.Fatalf("Load read %d owned keys, want 10000", len(st.Owned))
		}
	}
}

// TestFirewallContractNFTablesNetNS runs the firewall contract against
// nftables on the host's kernel, in a fresh network namespace: one
// NFTables, whose lasting connection outlives the errors the contract
// provokes. Skipped without root.
func TestFirewallContractNFTablesNetNS(t *testing.T) {
	inNewNetNS(t)
	fw := ipvs.NewNFTables()
	defer fw.Close()
	testFirewallContract(t, fw)
}

// TestNFTablesLargeTable writes and reads back the table of 10,000
// Services: a transaction of more messages than the default receive
// buffer holds acknowledgements for (ENOBUFS after the kernel
// committed, before the buffers were sized for it).
func TestNFTablesLargeTable(t *testing.T) {
	if testing.Short() || os.Getenv(lab.GuestEnv) == "1" {
		t.Skip("short, or in the kernel lab's emulated guest: writes 130,000 nftables elements (the host's kernel runs it)")
	}
	fw, spec := tableOf10k(t)
	got, err := fw.Load()
	if err != nil {
		t.Fatal(err)
	}
	if got.Stamp != spec.Stamp() || len(got.Owned) != len(spec.Owned) || len(got.Content.Endpoints) != len(spec.Endpoints) {
		t.Errorf("Load = stamp %q, %d owned, %d endpoints; want %q, %d, %d",
			got.Stamp, len(got.Owned), len(got.Content.Endpoints), spec.Stamp(), len(spec.Owned), len(spec.Endpoints))
	}
}

// TestNFTablesUntouched: on the host's kernel, in a fresh network
// namespace, Untouched holds after NFTables' own transactions and reads,
// and not after anyone else's transaction, even in another table.
func TestNFTablesUntouched(t *testing.T) {
	inNewNetNS(t)
	fw := ipvs.NewNFTables()
	defer fw.Close()
	other := func() {
		c, err := nftables.New()
		if err != nil {
			t.Fatal(err)
		}
		c.AddTable(&nftables.Table{Name: "someone-else", Family: nftables.TableFamilyIPv4})
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	spec := benchFirewallSpec(3)
	moved := ipvs.FirewallDelta{From: spec.Stamp(), To: "moved",
		Add: ipvs.FirewallSpec{Endpoints: []netip.Addr{netip.MustParseAddr("10.250.0.1")}}}
	key := []model.VirtualServiceKey{{Addr: netip.MustParseAddr("192.0.2.1"), Port: 30080, Protocol: model.TCP}}
	for _, st := range []struct {
		name string
		do   func() error
		want bool
	}{
		{"new", func() error { return nil }, false},
		{"after Load of no table", func() error { _, err := fw.Load(); return err }, true},
		{"after Sync", func() error { return fw.Sync(spec) }, true},
		{"after Update", func() error { return fw.Update(moved) }, true},
		{"after RecordOwned", func() error { return fw.RecordOwned(key, nil) }, true},
		{"after another table's transaction", func() error { other(); return nil }, false},
		{"after RecordOwned, still", func() error { return fw.RecordOwned(nil, key) }, false},
		{"after Load", func() error { _, err := fw.Load(); return err }, true},
		{"after a failed RecordOwned", func() error {
			if err := fw.RecordOwned(nil, key); err == nil {
				t.Error("RecordOwned dropping a missing key succeeded")
			}
			return nil
		}, false},
		{"after Sync again", func() error { return fw.Sync(spec) }, true},
	} {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if got := fw.Untouched(); got != st.want {
			t.Errorf("%s: Untouched() = %t, want %t", st.name, got, st.want)
		}
	}
}

// BenchmarkApplyFullUnchangedNFTables is a periodic resync of 10,000
// unchanged Services with the nftables table on the host's kernel (in a
// fresh network namespace) and the fake IPVS kernel: the table's part
// of a resync.
func BenchmarkApplyFullUnchangedNFTables(b *testing.B) {
	inNewNetNS(b)
	plan := benchPlan(10000)
	r := newRig()
	fw := ipvs.NewNFTables()
	defer fw.Close()
	dp := r.plainDataplane(b, func(c *ipvs.Config) { c.Firewall = fw })
	if err := dp.Apply(b.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := dp.Apply(b.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
			b.Fatal(err)
		}
	}
}
