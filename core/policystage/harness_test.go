package policystage_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/model/modeltest"
	"github.com/switchyard-lb/switchyard/core/plan"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/core/plugin/plugintest"
	"github.com/switchyard-lb/switchyard/core/policystage"
	"github.com/switchyard-lb/switchyard/ipvs/dryrun"
)

var (
	t0     = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	webKey = model.ServiceKey{Namespace: "default", Name: "web"}
	apiKey = model.ServiceKey{Namespace: "prod", Name: "api"}
	nodeA  = &model.Node{Name: "node-a", Addresses: []netip.Addr{netip.MustParseAddr("192.168.1.10")}, Ready: true}

	webEndpoints = []model.Endpoint{modeltest.Ready("10.244.1.2", "node-a"), modeltest.Ready("10.244.2.2", "node-b")}
	cmpOpts      = []cmp.Option{cmpopts.EquateEmpty(), cmpopts.EquateComparable(netip.Addr{}, netip.AddrPort{}, netip.Prefix{})}
)

func cat(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// table renders the dataplane with runs of spaces collapsed.
func table(dp *dryrun.Dataplane) []string {
	lines := strings.Split(strings.TrimSpace(dp.String()), "\n")[3:] // skip the 3 title lines
	for i, l := range lines {
		lines[i] = strings.Join(strings.Fields(l), " ")
	}
	return lines
}

// loop drives a Stage as core/reconcile's Sync does, without announcers
// or health checks: it takes the watch's changes, replans them with the
// real planner, weighs the plan, and hands the dataplane the Services
// whose weighted plan changed (everything on the first round, as a full
// Apply). The node is node-a.
type loop struct {
	src     *plugintest.Source
	planner *plan.Planner
	stage   *policystage.Stage
	dp      plugin.Dataplane
	now     func() time.Time
	nodes   map[string]*model.Node
	full    bool // the next Apply is a full one
	// status is the stage's last Status, as the loop's State shows it.
	status []policystage.Status
}

// newLoop wires the stage as core/reconcile and cmd/switchyard do: the
// planner and, when cfg names none, the stage get dp's schedulers.
func newLoop(src *plugintest.Source, dp plugin.Dataplane, now func() time.Time, cfg policystage.Config) *loop {
	sched, _ := dp.(plugin.SchedulerSet)
	if cfg.Schedulers == nil {
		cfg.Schedulers = sched
	}
	return &loop{src: src, planner: plan.New(plan.Options{Schedulers: sched}), stage: policystage.New(cfg), dp: dp, now: now,
		nodes: map[string]*model.Node{}, full: true}
}

// Sync runs one round; it does nothing before the source and the
// policies have synced.
func (l *loop) Sync(ctx context.Context) error {
	if !l.src.HasSynced() || !l.stage.HasSynced() {
		return nil
	}
	d := l.src.Take()
	for name, n := range d.Nodes {
		if n == nil {
			delete(l.nodes, name)
		} else {
			l.nodes[name] = n
		}
	}
	changed := l.planner.Update(l.nodes["node-a"], d.Services)
	changed, p := l.stage.Weigh(ctx, policystage.Round{
		Now: l.now(), Node: l.nodes["node-a"], Services: d.Services, Plan: l.planner.Plan(), Changed: changed,
	})
	if st := l.stage.TakeStatus(); st != nil {
		l.status = st
	}
	if !l.full && len(changed) == 0 {
		return nil
	}
	if err := l.dp.Apply(ctx, plugin.Update{Plan: p, Changed: changed, Full: l.full}); err != nil {
		return err
	}
	l.full = false
	return nil
}

func mustSync(t testing.TB, l *loop) {
	t.Helper()
	if err := l.Sync(context.Background()); err != nil {
		t.Fatalf("Sync: %v", err)
	}
}

// harness is a loop over the dry-run dataplane.
type harness struct {
	src  *plugintest.Source
	dry  *dryrun.Dataplane
	loop *loop
}

func newHarness(t *testing.T) *harness {
	return &harness{src: plugintest.NewSource(), dry: dryrun.New()}
}
