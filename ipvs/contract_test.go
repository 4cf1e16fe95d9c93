package ipvs_test

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/ipvs/ipvstest"
	"github.com/switchyard-lb/switchyard/test/lab"
)

// The contract: one scenario, run against the fake on any host and
// against the real kernel in the lab. Where they differ, the fake is
// wrong.

func TestKernelContractFake(t *testing.T) {
	testKernelContract(t, ipvstest.NewFake())
}

func TestKernelContractNetlink(t *testing.T) {
	testKernelContract(t, labKernel(t))
}

// labKernel is the real kernel's IPVS, closed when t ends; outside the lab
// guest it skips t.
func labKernel(t *testing.T) *ipvs.Netlink {
	t.Helper()
	if os.Getenv(lab.GuestEnv) != "1" {
		t.Skipf("guest-only: needs IPVS in the kernel lab (%s=1); run `make test-lab`", lab.GuestEnv)
	}
	n, err := ipvs.NewNetlink()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// errInvalid stands for "any error": input the interface rejects itself.
var errInvalid = errors.New("invalid input")

// errMismatch says how err differs from what a call wants: no error for
// nil, any for errInvalid, else one that Is want. It is "" when err fits.
func errMismatch(err, want error) string {
	switch {
	case want == nil && err != nil:
		return err.Error()
	case want == errInvalid && err == nil:
		return "no error, want one"
	case want != nil && want != errInvalid && !errors.Is(err, want):
		return fmt.Sprintf("error %v, want %v", err, want)
	}
	return ""
}

// checkStepErr stops the test when a contract step's error does not fit.
func checkStepErr(t *testing.T, step string, err, wantErr error) {
	t.Helper()
	if m := errMismatch(err, wantErr); m != "" {
		t.Fatalf("%s: %s", step, m)
	}
}

func testKernelContract(t *testing.T, k ipvs.Kernel) {
	vip4 := model.VirtualServiceKey{Addr: netip.MustParseAddr("10.96.7.1"), Port: 80, Protocol: model.TCP}
	vip4udp := model.VirtualServiceKey{Addr: vip4.Addr, Port: 80, Protocol: model.UDP}
	vip6 := model.VirtualServiceKey{Addr: netip.MustParseAddr("fd00:96::7:1"), Port: 443, Protocol: model.SCTP}
	missing := model.VirtualServiceKey{Addr: netip.MustParseAddr("10.96.7.99"), Port: 80, Protocol: model.TCP}
	be := func(addr string, port uint16, weight uint32) ipvs.Destination {
		return ipvs.Destination{DestinationKey: ipvs.DestinationKey{Addr: netip.MustParseAddr(addr), Port: port}, Weight: weight}
	}
	state := func(d ipvs.Destination) ipvs.DestinationState { return ipvs.DestinationState{Destination: d} }

	rr4 := ipvs.Service{VirtualServiceKey: vip4, Scheduler: "rr"}
	sticky4 := ipvs.Service{VirtualServiceKey: vip4, Scheduler: "wrr", Flags: ipvs.FlagPersistent, Persistence: 3 * time.Hour}
	udp4 := ipvs.Service{VirtualServiceKey: vip4udp, Scheduler: "mh", Flags: ipvs.FlagSchedOpt2}
	sctp6 := ipvs.Service{VirtualServiceKey: vip6, Scheduler: "sh"}
	// Firewall-mark services: one mark, once per family.
	fwm4 := ipvs.Service{VirtualServiceKey: ipvs.MarkKey(42, false), Scheduler: "rr"}
	fwm4sticky := ipvs.Service{VirtualServiceKey: fwm4.VirtualServiceKey, Scheduler: "rr", Flags: ipvs.FlagPersistent, Persistence: time.Minute}
	fwm6 := ipvs.Service{VirtualServiceKey: ipvs.MarkKey(42, true), Scheduler: "wrr"}

	steps := []struct {
		name    string
		do      func() error
		wantErr error
		want    []ipvstest.Entry // the table after the step, when not nil
	}{
		{name: "add tcp service", do: func() error { return k.AddService(rr4) },
			want: []ipvstest.Entry{{Service: rr4}}},
		{name: "add it again", do: func() error { return k.AddService(rr4) }, wantErr: ipvs.ErrExists},
		{name: "same address and port, udp, mh with mh-port", do: func() error { return k.AddService(udp4) }},
		{name: "ipv6 sctp service", do: func() error { return k.AddService(sctp6) },
			want: []ipvstest.Entry{{Service: rr4}, {Service: udp4}, {Service: sctp6}}},
		{name: "add destinations", do: func() error {
			return errors.Join(
				k.AddDestination(vip4, be("10.244.2.2", 8080, 1)),
				k.AddDestination(vip4, be("10.244.1.2", 8080, 2)),
				k.AddDestination(vip4, be("10.244.1.2", 8081, 0)),
				k.AddDestination(vip6, be("fd00:244:1::2", 8443, 5)),
			)
		}},
		{name: "add a destination again", do: func() error { return k.AddDestination(vip4, be("10.244.2.2", 8080, 7)) }, wantErr: ipvs.ErrExists},
		{name: "destination of the other family", do: func() error { return k.AddDestination(vip4, be("fd00:244:1::2", 8080, 1)) }, wantErr: errInvalid},
		{name: "destination of a missing service", do: func() error { return k.AddDestination(missing, be("10.244.1.2", 8080, 1)) }, wantErr: ipvs.ErrNotFound},
		{name: "a missing service has no destinations", do: func() error {
			if got, err := k.Destinations(missing); err != nil || len(got) != 0 {
				return fmt.Errorf("Destinations(missing) = %v, %v; want none, no error", got, err)
			}
			return nil
		}},
		{name: "drain one", do: func() error { return k.UpdateDestination(vip4, be("10.244.2.2", 8080, 0)) },
			want: []ipvstest.Entry{
				{Service: rr4, Destinations: []ipvs.DestinationState{
					state(be("10.244.1.2", 8080, 2)), state(be("10.244.1.2", 8081, 0)), state(be("10.244.2.2", 8080, 0)),
				}},
				{Service: udp4},
				{Service: sctp6, Destinations: []ipvs.DestinationState{state(be("fd00:244:1::2", 8443, 5))}},
			}},
		{name: "update a missing destination", do: func() error { return k.UpdateDestination(vip4, be("10.244.3.2", 8080, 1)) }, wantErr: ipvs.ErrNotFound},
		{name: "delete a missing destination", do: func() error { return k.DeleteDestination(vip4, be("10.244.3.2", 8080, 0).DestinationKey) }, wantErr: ipvs.ErrNotFound},
		{name: "delete a destination", do: func() error { return k.DeleteDestination(vip4, be("10.244.1.2", 8081, 0).DestinationKey) }},
		{name: "make the service sticky", do: func() error { return k.UpdateService(sticky4) },
			want: []ipvstest.Entry{
				{Service: sticky4, Destinations: []ipvs.DestinationState{state(be("10.244.1.2", 8080, 2)), state(be("10.244.2.2", 8080, 0))}},
				{Service: udp4},
				{Service: sctp6, Destinations: []ipvs.DestinationState{state(be("fd00:244:1::2", 8443, 5))}},
			}},
		{name: "look the sticky service up", do: func() error { return lookUp(k, sticky4) }},
		{name: "look a missing service up", do: func() error {
			_, err := k.Service(missing)
			return err
		}, wantErr: ipvs.ErrNotFound},
		{name: "persistence without its flag", do: func() error {
			return k.UpdateService(ipvs.Service{VirtualServiceKey: vip4, Scheduler: "rr", Persistence: time.Minute})
		}, wantErr: errInvalid},
		{name: "update a missing service", do: func() error { return k.UpdateService(ipvs.Service{VirtualServiceKey: missing, Scheduler: "rr"}) }, wantErr: ipvs.ErrNotFound},
		{name: "delete a missing service", do: func() error { return k.DeleteService(missing) }, wantErr: ipvs.ErrNotFound},
		{name: "delete services with their destinations", do: func() error {
			return errors.Join(k.DeleteService(vip4), k.DeleteService(vip6))
		}, want: []ipvstest.Entry{{Service: udp4}}},
		{name: "delete the last", do: func() error { return k.DeleteService(vip4udp) }, want: []ipvstest.Entry{}},
		{name: "firewall-mark services of both families", do: func() error {
			return errors.Join(
				k.AddService(fwm4), k.AddService(fwm6),
				k.AddDestination(fwm4.VirtualServiceKey, be("10.244.2.2", 8080, 1)),
				k.AddDestination(fwm6.VirtualServiceKey, be("fd00:244:1::2", 8443, 3)),
			)
		}, want: []ipvstest.Entry{
			{Service: fwm4, Destinations: []ipvs.DestinationState{state(be("10.244.2.2", 8080, 1))}},
			{Service: fwm6, Destinations: []ipvs.DestinationState{state(be("fd00:244:1::2", 8443, 3))}},
		}},
		{name: "add a mark service again", do: func() error { return k.AddService(fwm4) }, wantErr: ipvs.ErrExists},
		{name: "look the mark services up", do: func() error { return errors.Join(lookUp(k, fwm4), lookUp(k, fwm6)) }},
		{name: "look a missing mark service up", do: func() error {
			_, err := k.Service(ipvs.MarkKey(43, false))
			return err
		}, wantErr: ipvs.ErrNotFound},
		{name: "an IPv4 destination in the IPv6 mark service", do: func() error {
			return k.AddDestination(fwm6.VirtualServiceKey, be("10.244.2.2", 8080, 1))
		}, wantErr: errInvalid},
		{name: "make the mark service sticky", do: func() error { return k.UpdateService(fwm4sticky) }, want: []ipvstest.Entry{
			{Service: fwm4sticky, Destinations: []ipvs.DestinationState{state(be("10.244.2.2", 8080, 1))}},
			{Service: fwm6, Destinations: []ipvs.DestinationState{state(be("fd00:244:1::2", 8443, 3))}},
		}},
		{name: "delete the mark services", do: func() error {
			return errors.Join(
				k.DeleteDestination(fwm4.VirtualServiceKey, be("10.244.2.2", 8080, 0).DestinationKey),
				k.DeleteService(fwm4.VirtualServiceKey), k.DeleteService(fwm6.VirtualServiceKey),
			)
		}, want: []ipvstest.Entry{}},
	}
	for _, st := range steps {
		checkStepErr(t, st.name, st.do(), st.wantErr)
		if st.want == nil {
			continue
		}
		if diff := cmp.Diff(st.want, dump(t, k), cmpopts.EquateComparable(netip.Addr{})); diff != "" {
			t.Fatalf("%s: table (-want +got):\n%s", st.name, diff)
		}
	}
}

// lookUp checks that Kernel.Service finds want as it is.
func lookUp(k ipvs.Kernel, want ipvs.Service) error {
	got, err := k.Service(want.VirtualServiceKey)
	if err != nil {
		return err
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
		return fmt.Errorf("Service(%v) (-want +got):\n%s", want.VirtualServiceKey, diff)
	}
	return nil
}

// dump reads the whole table through the interface.
func dump(t *testing.T, k ipvs.Kernel) []ipvstest.Entry {
	t.Helper()
	svcs, err := k.Services()
	if err != nil {
		t.Fatal(err)
	}
	out := []ipvstest.Entry{}
	for _, s := range svcs {
		dsts, err := k.Destinations(s.VirtualServiceKey)
		if err != nil {
			t.Fatal(err)
		}
		if len(dsts) == 0 {
			dsts = nil
		}
		out = append(out, ipvstest.Entry{Service: s, Destinations: dsts})
	}
	return out
}

// The timeouts are part of the Kernel contract too.

func TestTimeoutsContractFake(t *testing.T) {
	testTimeoutsContract(t, ipvstest.NewFake())
}

func TestTimeoutsContractNetlink(t *testing.T) {
	testTimeoutsContract(t, labKernel(t))
}

// testTimeoutsContract expects a kernel whose timeouts nobody changed
// since ip_vs loaded, and leaves them as it found them.
func testTimeoutsContract(t *testing.T, k ipvs.Kernel) {
	orig, err := k.Timeouts()
	if err != nil {
		t.Fatalf("Timeouts: %v", err)
	}
	if diff := cmp.Diff(ipvstest.DefaultTimeouts, orig); diff != "" {
		t.Errorf("timeouts of a fresh ip_vs (-want +got):\n%s", diff)
	}
	t.Cleanup(func() {
		if err := k.SetTimeouts(orig); err != nil {
			t.Errorf("restore timeouts: %v", err)
		}
	})
	s := time.Second
	steps := []struct {
		name    string
		set     ipvs.Timeouts
		wantErr bool
		want    ipvs.Timeouts
	}{
		{name: "tcp only", set: ipvs.Timeouts{TCP: 3600 * s}, want: ipvs.Timeouts{TCP: 3600 * s, TCPFin: orig.TCPFin, UDP: orig.UDP}},
		{name: "tcpfin and udp", set: ipvs.Timeouts{TCPFin: 30 * s, UDP: 45 * s}, want: ipvs.Timeouts{TCP: 3600 * s, TCPFin: 30 * s, UDP: 45 * s}},
		{name: "zero leaves all", set: ipvs.Timeouts{}, want: ipvs.Timeouts{TCP: 3600 * s, TCPFin: 30 * s, UDP: 45 * s}},
		{name: "sub-second", set: ipvs.Timeouts{UDP: 1500 * time.Millisecond}, wantErr: true, want: ipvs.Timeouts{TCP: 3600 * s, TCPFin: 30 * s, UDP: 45 * s}},
		{name: "negative", set: ipvs.Timeouts{TCP: -s}, wantErr: true, want: ipvs.Timeouts{TCP: 3600 * s, TCPFin: 30 * s, UDP: 45 * s}},
	}
	for _, st := range steps {
		err := k.SetTimeouts(st.set)
		if (err != nil) != st.wantErr {
			t.Fatalf("%s: SetTimeouts(%+v) = %v, want error: %t", st.name, st.set, err, st.wantErr)
		}
		got, err := k.Timeouts()
		if err != nil {
			t.Fatalf("%s: Timeouts: %v", st.name, err)
		}
		if diff := cmp.Diff(st.want, got); diff != "" {
			t.Errorf("%s: timeouts (-want +got):\n%s", st.name, diff)
		}
	}
}

// Batches are part of the Kernel contract where the Kernel is a Batcher.

func TestBatchContractFake(t *testing.T) {
	testBatchContract(t, ipvstest.NewFake())
}

func TestBatchContractNetlink(t *testing.T) {
	testBatchContract(t, labKernel(t))
}

// batchKernel is a Kernel that batches.
type batchKernel interface {
	ipvs.Kernel
	ipvs.Batcher
}

// outcome names an error by what it wraps, for comparing batches' errors.
func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ipvs.ErrExists):
		return "exists"
	case errors.Is(err, ipvs.ErrNotFound):
		return "not found"
	}
	return "invalid"
}

func testBatchContract(t *testing.T, k batchKernel) {
	vip4 := model.VirtualServiceKey{Addr: netip.MustParseAddr("10.96.8.1"), Port: 80, Protocol: model.TCP}
	vip6 := model.VirtualServiceKey{Addr: netip.MustParseAddr("fd00:96::8:1"), Port: 443, Protocol: model.SCTP}
	missing := model.VirtualServiceKey{Addr: netip.MustParseAddr("10.96.8.99"), Port: 80, Protocol: model.TCP}
	fwm := ipvs.MarkKey(77, false)
	be := func(addr string, port uint16, weight uint32) ipvs.Destination {
		return ipvs.Destination{DestinationKey: ipvs.DestinationKey{Addr: netip.MustParseAddr(addr), Port: port}, Weight: weight}
	}
	state := func(d ipvs.Destination) ipvs.DestinationState { return ipvs.DestinationState{Destination: d} }
	svc := func(k model.VirtualServiceKey, sched string) ipvs.Service {
		return ipvs.Service{VirtualServiceKey: k, Scheduler: sched}
	}
	addSvc := func(s ipvs.Service) ipvs.Command { return ipvs.Command{Kind: ipvs.CmdAddService, Service: s} }
	destCmd := func(kind ipvs.CommandKind, k model.VirtualServiceKey, d ipvs.Destination) ipvs.Command {
		return ipvs.Command{Kind: kind, Service: ipvs.Service{VirtualServiceKey: k}, Dest: d}
	}
	sticky4 := ipvs.Service{VirtualServiceKey: vip4, Scheduler: "wrr", Flags: ipvs.FlagPersistent, Persistence: time.Hour}

	type step struct {
		name  string
		cmds  []ipvs.Command
		want  []string         // each command's outcome
		table []ipvstest.Entry // the table after the batch
	}
	steps := []step{{
		name: "adds, with failures between them",
		cmds: []ipvs.Command{
			addSvc(svc(vip4, "rr")),
			destCmd(ipvs.CmdAddDestination, vip4, be("10.244.1.2", 8080, 1)),
			destCmd(ipvs.CmdAddDestination, vip4, be("10.244.2.2", 8080, 2)),
			addSvc(svc(vip4, "rr")),
			destCmd(ipvs.CmdAddDestination, missing, be("10.244.1.2", 8080, 1)),
			destCmd(ipvs.CmdAddDestination, vip4, be("fd00:244:1::2", 8080, 1)),
			addSvc(svc(vip6, "sh")),
			destCmd(ipvs.CmdAddDestination, vip6, be("fd00:244:1::2", 8443, 3)),
			destCmd(ipvs.CmdUpdateDestination, vip4, be("10.244.1.2", 8080, 5)),
			addSvc(svc(fwm, "mh")),
			destCmd(ipvs.CmdAddDestination, fwm, be("10.244.9.2", 8080, 1)),
		},
		want: []string{"ok", "ok", "ok", "exists", "not found", "invalid", "ok", "ok", "ok", "ok", "ok"},
		table: []ipvstest.Entry{
			{Service: svc(fwm, "mh"), Destinations: []ipvs.DestinationState{state(be("10.244.9.2", 8080, 1))}},
			{Service: svc(vip4, "rr"), Destinations: []ipvs.DestinationState{state(be("10.244.1.2", 8080, 5)), state(be("10.244.2.2", 8080, 2))}},
			{Service: svc(vip6, "sh"), Destinations: []ipvs.DestinationState{state(be("fd00:244:1::2", 8443, 3))}},
		},
	}, {
		name: "updates and deletions, the last failing",
		cmds: []ipvs.Command{
			{Kind: ipvs.CmdUpdateService, Service: sticky4},
			destCmd(ipvs.CmdDeleteDestination, vip4, be("10.244.2.2", 8080, 0)),
			destCmd(ipvs.CmdDeleteDestination, vip4, be("10.244.3.2", 8080, 0)),
			destCmd(ipvs.CmdUpdateDestination, vip4, be("10.244.1.2", 8080, 0)),
			{Kind: ipvs.CmdDeleteService, Service: ipvs.Service{VirtualServiceKey: vip6}},
			{Kind: ipvs.CmdDeleteService, Service: ipvs.Service{VirtualServiceKey: fwm}},
			{Kind: ipvs.CmdUpdateService, Service: svc(missing, "rr")},
			{Kind: ipvs.CmdDeleteService, Service: ipvs.Service{VirtualServiceKey: missing}},
		},
		want: []string{"ok", "ok", "not found", "ok", "ok", "ok", "not found", "not found"},
		table: []ipvstest.Entry{
			{Service: sticky4, Destinations: []ipvs.DestinationState{state(be("10.244.1.2", 8080, 0))}},
		},
	}, {
		name: "delete the last",
		cmds: []ipvs.Command{{Kind: ipvs.CmdDeleteService, Service: ipvs.Service{VirtualServiceKey: vip4}}},
		want: []string{"ok"}, table: []ipvstest.Entry{},
	}}
	// A batch larger than one message holds: 700 services of two real
	// servers each, every 50th command an add of a service already there,
	// so that failures fall on and between the messages' ends.
	const n = 700
	var many, unmany []ipvs.Command
	var manyWant, unmanyWant []string
	var manyTable []ipvstest.Entry
	for i := range n {
		k := model.VirtualServiceKey{Addr: netip.AddrFrom4([4]byte{10, 97, byte(i >> 8), byte(i)}), Port: 80, Protocol: model.TCP}
		d1, d2 := be("10.244.1.2", 8080, 1), be("10.244.2.2", 8080, uint32(i%7))
		for _, c := range []ipvs.Command{addSvc(svc(k, "rr")), destCmd(ipvs.CmdAddDestination, k, d1), destCmd(ipvs.CmdAddDestination, k, d2)} {
			many, manyWant = append(many, c), append(manyWant, "ok")
			if len(many)%50 == 49 {
				many, manyWant = append(many, addSvc(svc(k, "rr"))), append(manyWant, "exists")
			}
		}
		manyTable = append(manyTable, ipvstest.Entry{Service: svc(k, "rr"), Destinations: []ipvs.DestinationState{state(d1), state(d2)}})
		unmany = append(unmany, ipvs.Command{Kind: ipvs.CmdDeleteService, Service: ipvs.Service{VirtualServiceKey: k}})
		unmanyWant = append(unmanyWant, "ok")
	}
	steps = append(steps,
		step{name: "700 services in one batch", cmds: many, want: manyWant, table: manyTable},
		step{name: "all deleted in one batch", cmds: unmany, want: unmanyWant, table: []ipvstest.Entry{}})

	for _, st := range steps {
		errs := k.Batch(st.cmds)
		got := make([]string, len(errs))
		for i, err := range errs {
			got[i] = outcome(err)
		}
		if diff := cmp.Diff(st.want, got); diff != "" {
			t.Fatalf("%s: outcomes (-want +got):\n%s\nerrors: %v", st.name, diff, errors.Join(errs...))
		}
		if diff := cmp.Diff(st.table, dump(t, k), cmpopts.EquateComparable(netip.Addr{})); diff != "" {
			t.Fatalf("%s: table (-want +got):\n%s", st.name, diff)
		}
	}
}
