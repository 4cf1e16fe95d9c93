package dryrun_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plan"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/ipvs/dryrun"
)

var (
	web  = model.ServiceKey{Namespace: "default", Name: "web"}
	dns  = model.ServiceKey{Namespace: "kube-system", Name: "dns"}
	late = model.ServiceKey{Namespace: "default", Name: "zz"}
)

func vs(addr string, port uint16, proto model.Protocol, dsts ...string) model.VirtualService {
	v := model.VirtualService{
		VirtualServiceKey: model.VirtualServiceKey{Addr: netip.MustParseAddr(addr), Port: port, Protocol: proto},
		Kind:              model.FrontendClusterIP,
		Scheduler:         "rr",
	}
	for _, d := range dsts {
		ap := netip.MustParseAddrPort(d)
		v.Destinations = append(v.Destinations, model.Destination{Addr: ap.Addr(), Port: ap.Port(), Weight: 1})
	}
	return v
}

func planOf(sps ...*model.ServicePlan) *model.Plan {
	p := &model.Plan{Services: map[model.ServiceKey]*model.ServicePlan{}}
	for _, sp := range sps {
		p.Services[sp.Key] = sp
	}
	p.Services = plan.Arbitrate(p.Services) // one Service per virtual service, as the planner gives it
	return p
}

const header = "IP Virtual Server version 1.2.1 (size=4096)\n" +
	"Prot LocalAddress:Port Scheduler Flags\n" +
	"  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn\n"

// TestFormatExact pins the bytes, trailing spaces included, to what
// ipvsadm 1.31 prints for the same kernel table.
func TestFormatExact(t *testing.T) {
	persistent := vs("10.96.0.10", 53, model.UDP, "10.244.2.3:53", "10.244.1.2:53")
	persistent.AffinityTimeout = 10800 * time.Second
	mh := vs("10.96.0.20", 443, model.TCP, "10.244.1.7:8443")
	mh.Scheduler, mh.Flags = "mh", []string{"mh-port", "mh-fallback"}
	mh.Destinations[0].Weight = 0
	dp := dryrun.New()
	err := dp.Apply(context.Background(), plugin.Update{Full: true, Plan: planOf(
		&model.ServicePlan{Key: dns, VirtualServices: []model.VirtualService{persistent}},
		&model.ServicePlan{Key: web, VirtualServices: []model.VirtualService{
			vs("10.96.0.1", 80, model.TCP, "10.244.1.2:8080"),
			mh,
			vs("fd00::1", 80, model.TCP, "[fd00:10::2]:8080"),
			vs("10.96.0.1", 81, model.SCTP),
		}},
	)})
	if err != nil {
		t.Fatal(err)
	}
	want := header +
		"TCP  10.96.0.1:80 rr\n" +
		"  -> 10.244.1.2:8080              Masq    1      0          0         \n" +
		"TCP  10.96.0.20:443 mh (mh-fallback,mh-port)\n" +
		"  -> 10.244.1.7:8443              Masq    0      0          0         \n" +
		"UDP  10.96.0.10:53 rr persistent 10800\n" +
		"  -> 10.244.1.2:53                Masq    1      0          0         \n" +
		"  -> 10.244.2.3:53                Masq    1      0          0         \n" +
		"SCTP  10.96.0.1:81 rr\n" +
		"TCP  [fd00::1]:80 rr\n" +
		"  -> [fd00:10::2]:8080            Masq    1      0          0         \n"
	if diff := cmp.Diff(want, dp.String()); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
	var b strings.Builder
	if _, err := dp.WriteTo(&b); err != nil || b.String() != want {
		t.Errorf("WriteTo wrote %q, %v; want the same as String", b.String(), err)
	}
}

// trimmed renders the table without ipvsadm's trailing padding, for
// readable expectations.
func trimmed(dp *dryrun.Dataplane) string {
	lines := strings.Split(dp.String(), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return strings.Join(lines, "\n")
}

func TestApplySequence(t *testing.T) {
	webPlan := &model.ServicePlan{Key: web, VirtualServices: []model.VirtualService{vs("10.96.0.1", 80, model.TCP, "10.244.1.2:8080")}}
	webPlan2 := &model.ServicePlan{Key: web, VirtualServices: []model.VirtualService{vs("10.96.0.1", 80, model.TCP, "10.244.1.2:8080", "10.244.1.3:8080")}}
	dnsPlan := &model.ServicePlan{Key: dns, VirtualServices: []model.VirtualService{vs("10.96.0.10", 53, model.UDP, "10.244.2.3:53")}}
	// late wants the same virtual service as web: the plan gives it to
	// web, and back to late when web leaves (the planner then reports
	// both as changed).
	clash := &model.ServicePlan{Key: late, VirtualServices: []model.VirtualService{vs("10.96.0.1", 80, model.TCP, "10.9.9.9:1")}}

	steps := []struct {
		name   string
		update plugin.Update
		want   string
	}{
		{"full apply", plugin.Update{Full: true, Plan: planOf(webPlan, dnsPlan)}, header +
			"TCP  10.96.0.1:80 rr\n" +
			"  -> 10.244.1.2:8080              Masq    1      0          0\n" +
			"UDP  10.96.0.10:53 rr\n" +
			"  -> 10.244.2.3:53                Masq    1      0          0\n"},
		{"incremental apply touches only changed keys", plugin.Update{Changed: []model.ServiceKey{web}, Plan: planOf(webPlan2)}, header +
			"TCP  10.96.0.1:80 rr\n" +
			"  -> 10.244.1.2:8080              Masq    1      0          0\n" +
			"  -> 10.244.1.3:8080              Masq    1      0          0\n" +
			"UDP  10.96.0.10:53 rr\n" +
			"  -> 10.244.2.3:53                Masq    1      0          0\n"},
		{"a clashing Service loses to the one sorting first", plugin.Update{Changed: []model.ServiceKey{late}, Plan: planOf(webPlan2, dnsPlan, clash)}, header +
			"TCP  10.96.0.1:80 rr\n" +
			"  -> 10.244.1.2:8080              Masq    1      0          0\n" +
			"  -> 10.244.1.3:8080              Masq    1      0          0\n" +
			"UDP  10.96.0.10:53 rr\n" +
			"  -> 10.244.2.3:53                Masq    1      0          0\n"},
		{"deleted Service is removed, the clashing one takes over", plugin.Update{Changed: []model.ServiceKey{web, late}, Plan: planOf(dnsPlan, clash)}, header +
			"TCP  10.96.0.1:80 rr\n" +
			"  -> 10.9.9.9:1                   Masq    1      0          0\n" +
			"UDP  10.96.0.10:53 rr\n" +
			"  -> 10.244.2.3:53                Masq    1      0          0\n"},
		{"full apply drops what the plan lacks", plugin.Update{Full: true, Changed: []model.ServiceKey{web}, Plan: planOf(webPlan)}, header +
			"TCP  10.96.0.1:80 rr\n" +
			"  -> 10.244.1.2:8080              Masq    1      0          0\n"},
		{"empty full apply", plugin.Update{Full: true, Plan: planOf()}, header},
	}
	dp := dryrun.New()
	for _, st := range steps {
		if err := dp.Apply(context.Background(), st.update); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if diff := cmp.Diff(st.want, trimmed(dp)); diff != "" {
			t.Fatalf("%s: table (-want +got):\n%s", st.name, diff)
		}
	}
	if got, want := dp.Stats(), (dryrun.Stats{Applies: 6, FullApplies: 3}); !cmp.Equal(got, want) {
		t.Errorf("Stats() = %+v, want %+v", got, want)
	}
}

func TestApplyKeepsCopies(t *testing.T) {
	sp := &model.ServicePlan{Key: web, VirtualServices: []model.VirtualService{vs("10.96.0.1", 80, model.TCP, "10.244.1.2:8080")}}
	dp := dryrun.New()
	if err := dp.Apply(context.Background(), plugin.Update{Full: true, Plan: planOf(sp)}); err != nil {
		t.Fatal(err)
	}
	before := dp.String()
	sp.VirtualServices[0].Destinations[0].Weight = 7
	if after := dp.String(); after != before {
		t.Errorf("modifying the plan after Apply changed the table:\n%s", after)
	}
	if !dp.Serves(netip.MustParseAddr("10.96.0.1")) || dp.Serves(netip.MustParseAddr("10.96.0.2")) {
		t.Error("Serves disagrees with the table")
	}
}

func TestApplyErrors(t *testing.T) {
	dp := dryrun.New()
	if err := dp.Apply(context.Background(), plugin.Update{Full: true}); err == nil {
		t.Error("Apply without a plan: want an error")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := dp.Apply(ctx, plugin.Update{Full: true, Plan: planOf()}); err == nil {
		t.Error("Apply with a cancelled context: want an error")
	}
}

func TestConcurrentApplyAndRender(t *testing.T) {
	dp := dryrun.New()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for j := range 50 {
				sp := &model.ServicePlan{Key: model.ServiceKey{Namespace: "ns", Name: fmt.Sprint(i)},
					VirtualServices: []model.VirtualService{vs(fmt.Sprintf("10.0.%d.%d", i, j), 80, model.TCP, "10.1.1.1:80")}}
				if err := dp.Apply(context.Background(), plugin.Update{Changed: []model.ServiceKey{sp.Key}, Plan: planOf(sp)}); err != nil {
					t.Error(err)
				}
				_ = dp.String()
			}
		})
	}
	wg.Wait()
	if got := len(dp.Table()); got != 4 {
		t.Errorf("table has %d virtual services, want 4 (the last of each Service)", got)
	}
}

// TestSchedulersMirrorIPVS checks that the dry run accepts and rewrites
// schedulers exactly as the IPVS dataplane does.
func TestSchedulersMirrorIPVS(t *testing.T) {
	d := dryrun.New()
	type answer struct {
		Supported bool
		Weighted  string
	}
	var got, gotSet, want []answer
	for _, name := range append(ipvs.Schedulers(), "", "RR", "random", "maglev") {
		got = append(got, answer{d.SupportsScheduler(name), d.WeightedScheduler(name)})
		gotSet = append(gotSet, answer{dryrun.SchedulerSet.SupportsScheduler(name), dryrun.SchedulerSet.WeightedScheduler(name)})
		want = append(want, answer{ipvs.SupportsScheduler(name), ipvs.WeightedScheduler(name)})
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("dry run vs IPVS (-ipvs +dryrun):\n%s", diff)
	}
	if diff := cmp.Diff(want, gotSet); diff != "" {
		t.Errorf("dryrun.SchedulerSet vs IPVS (-ipvs +dryrun.SchedulerSet):\n%s", diff)
	}
	for _, names := range [][]string{d.Schedulers(), dryrun.SchedulerSet.Schedulers()} {
		if diff := cmp.Diff(ipvs.Schedulers(), names); diff != "" {
			t.Errorf("Schedulers() (-ipvs +dryrun):\n%s", diff)
		}
	}
}
