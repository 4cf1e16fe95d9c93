//go:build linux

package labtest

import (
	"net/netip"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/ipvs"
)

// benchServices is how many Services (ten endpoints each) the lab
// benchmark programs: LAB_BENCH_SERVICES, default 1,000.
func benchServices(b *testing.B) int {
	n := 1000
	if s := os.Getenv("LAB_BENCH_SERVICES"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n <= 0 || n > 65000 {
			b.Fatalf("LAB_BENCH_SERVICES=%q: want 1..65000", s)
		}
	}
	return n
}

func benchVIP(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 97, byte(i >> 8), byte(i)}) }

func benchDest(i, j int) ipvs.Destination {
	return ipvs.Destination{DestinationKey: ipvs.DestinationKey{
		Addr: netip.AddrFrom4([4]byte{10, 245, byte(i >> 8), byte(i)}), Port: uint16(8000 + j)}, Weight: 1}
}

// BenchmarkLabDataplane programs n Services x 10 endpoints from scratch
// with the Dataplane, then one endpoint change (a weight), then a full
// resync of the unchanged plan, next to a plain loop over the same kernel
// interfaces creating the same objects and making the same change (the
// floor), in the same boot. `make bench-lab` runs it (test/lab/lab.mk);
// by hand:
//
//	CGO_ENABLED=0 go test -exec 'labrun run -mem 768 -env LAB_BENCH_SERVICES=1000' -run NONE -bench LabDataplane -benchtime 1x ./ipvs/labtest
func BenchmarkLabDataplane(b *testing.B) {
	if !inGuest() {
		b.Skip("guest-only")
	}
	n := benchServices(b)
	k, err := ipvs.NewNetlink()
	if err != nil {
		b.Fatal(err)
	}
	defer k.Close()
	a, err := ipvs.NewNetlinkAddresses()
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	ct, err := ipvs.NewNetlinkConntrack()
	if err != nil {
		b.Fatal(err)
	}
	defer ct.Close()
	newDP := func() *ipvs.Dataplane {
		dp, err := ipvs.New(ipvs.Config{Kernel: k, Addresses: a, Sysctls: ipvs.ProcSysctls{}, Conntrack: ct})
		if err != nil {
			b.Fatal(err)
		}
		return dp
	}
	clear := func() {
		if err := newDP().Apply(b.Context(), plugin.Update{Plan: &model.Plan{}, Full: true}); err != nil {
			b.Fatal(err)
		}
	}
	clear()

	plan := &model.Plan{Services: map[model.ServiceKey]*model.ServicePlan{}}
	for i := range n {
		sk := model.ServiceKey{Namespace: "bench", Name: "svc" + strconv.Itoa(i)}
		vs := model.VirtualService{
			VirtualServiceKey: model.VirtualServiceKey{Addr: benchVIP(i), Port: 80, Protocol: model.TCP},
			Kind:              model.FrontendClusterIP, Scheduler: "rr",
		}
		for j := range 10 {
			d := benchDest(i, j)
			vs.Destinations = append(vs.Destinations, model.Destination{Addr: d.Addr, Port: d.Port, Weight: 1})
		}
		plan.Services[sk] = &model.ServicePlan{Key: sk, VirtualServices: []model.VirtualService{vs}}
	}

	for b.Loop() {
		// The floor: the same objects, created in a plain loop.
		start := time.Now()
		for i := range n {
			vip := benchVIP(i)
			if err := a.AddAddr(DummyName, vip); err != nil {
				b.Fatal(err)
			}
			key := model.VirtualServiceKey{Addr: vip, Port: 80, Protocol: model.TCP}
			if err := k.AddService(ipvs.Service{VirtualServiceKey: key, Scheduler: "rr"}); err != nil {
				b.Fatal(err)
			}
			for j := range 10 {
				if err := k.AddDestination(key, benchDest(i, j)); err != nil {
					b.Fatal(err)
				}
			}
		}
		floor := time.Since(start)
		// The floor of one endpoint change: the one kernel call the
		// Dataplane's change below comes down to, median of five.
		changeKey := model.VirtualServiceKey{Addr: benchVIP(42 % n), Port: 80, Protocol: model.TCP}
		changed := benchDest(42%n, 0)
		var changes []time.Duration
		for w := range 5 {
			changed.Weight = uint32(2 + w%2)
			start = time.Now()
			if err := k.UpdateDestination(changeKey, changed); err != nil {
				b.Fatal(err)
			}
			changes = append(changes, time.Since(start))
		}
		slices.Sort(changes)
		floorChange := changes[len(changes)/2]
		clear()

		dp := newDP()
		start = time.Now()
		if err := dp.Apply(b.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
			b.Fatal(err)
		}
		scratch := time.Since(start)

		sk := model.ServiceKey{Namespace: "bench", Name: "svc" + strconv.Itoa(42%n)}
		plan.Services[sk].VirtualServices[0].Destinations[0].Weight = 2
		start = time.Now()
		if err := dp.Apply(b.Context(), plugin.Update{Plan: plan, Changed: []model.ServiceKey{sk}}); err != nil {
			b.Fatal(err)
		}
		change := time.Since(start)
		plan.Services[sk].VirtualServices[0].Destinations[0].Weight = 1

		// A periodic full resync of the same Dataplane (the change above
		// undone), then what its kernel read is made of: the service dump,
		// the one pass over /proc/net/ip_vs, and the per-service real
		// server dumps that pass replaces.
		start = time.Now()
		if err := dp.Apply(b.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
			b.Fatal(err)
		}
		resync := time.Since(start)
		start = time.Now()
		svcs, err := k.Services()
		if err != nil {
			b.Fatal(err)
		}
		dumpServices := time.Since(start)
		start = time.Now()
		table, err := k.ReadTable()
		if err != nil {
			b.Fatal(err)
		}
		readTable := time.Since(start)
		if len(table) != n {
			b.Errorf("/proc/net/ip_vs showed %d virtual services, want %d", len(table), n)
		}
		start = time.Now()
		for _, s := range svcs {
			if _, err := k.Destinations(s.VirtualServiceKey); err != nil {
				b.Fatal(err)
			}
		}
		dumpDests := time.Since(start)

		start = time.Now()
		if err := newDP().Apply(b.Context(), plugin.Update{Plan: plan, Full: true}); err != nil {
			b.Fatal(err)
		}
		restart := time.Since(start)
		clear()

		b.ReportMetric(float64(n), "services")
		b.ReportMetric(floor.Seconds(), "floor-s")
		b.ReportMetric(scratch.Seconds(), "scratch-s")
		b.ReportMetric(scratch.Seconds()/floor.Seconds(), "scratch/floor")
		b.ReportMetric(float64(change.Microseconds())/1000, "change-ms")
		b.ReportMetric(float64(floorChange.Microseconds())/1000, "floor-change-ms")
		b.ReportMetric(change.Seconds()/floorChange.Seconds(), "change/floor")
		b.ReportMetric(restart.Seconds(), "restart-resync-s")
		b.ReportMetric(resync.Seconds(), "resync-s")
		b.ReportMetric(dumpServices.Seconds(), "dump-services-s")
		b.ReportMetric(readTable.Seconds(), "read-table-s")
		b.ReportMetric(dumpDests.Seconds(), "dump-dests-s")
	}
}
