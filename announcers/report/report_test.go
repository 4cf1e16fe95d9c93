package report_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/announcers/report"
	"github.com/switchyard-lb/switchyard/announcers/report/reporttest"
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/core/plugin/plugintest"
	"github.com/switchyard-lb/switchyard/core/runner/runnertest"
)

var (
	addrA = netip.MustParseAddr("192.0.2.1")
	addrB = netip.MustParseAddr("192.0.2.2")
	web   = model.ServiceKey{Namespace: "shop", Name: "web"}
	api   = model.ServiceKey{Namespace: "shop", Name: "api"}
	db    = model.ServiceKey{Namespace: "shop", Name: "db"}
)

func ev(svc model.ServiceKey, msg string) reporttest.Event {
	return reporttest.Event{Service: svc, Reason: report.ReasonAnnounceFailed, Message: msg}
}

// TestAnnounceFailures walks one announcer through a sequence of calls,
// each with the set, the error the wrapped announcer returns, the time,
// and the Events wanted.
func TestAnnounceFailures(t *testing.T) {
	both := []model.Announcement{{Addr: addrA, Service: api}, {Addr: addrA, Service: web}, {Addr: addrB, Service: db}}
	onlyB := []model.Announcement{{Addr: addrB, Service: db}}
	boom := errors.New("boom")
	failA := &plugin.AddrError{Addr: addrA, Err: boom}
	failWithdrawA := &plugin.AddrError{Addr: addrA, Withdraw: true, Err: boom}
	announceA := "announcer tor failed to announce 192.0.2.1: boom"
	withdrawA := "announcer tor failed to withdraw 192.0.2.1: boom"
	steps := []struct {
		name string
		at   time.Duration
		set  []model.Announcement
		err  error
		want []reporttest.Event
	}{
		{name: "success reports nothing", set: both},
		{name: "a failed address is reported on each of its Services", at: time.Minute, set: both,
			err: errors.Join(fmt.Errorf("wrapped: %w", failA)), want: []reporttest.Event{ev(api, announceA), ev(web, announceA)}},
		{name: "the same failure soon after is not reported again", at: 5 * time.Minute, set: both, err: failA},
		{name: "an error naming no address is not an Event", at: 6 * time.Minute, set: both, err: context.Canceled},
		{name: "a persisting failure is reported again after the interval", at: 11 * time.Minute, set: both, err: failA,
			want: []reporttest.Event{ev(api, announceA), ev(web, announceA)}},
		{name: "a failed withdrawal goes to the Services the address had", at: 12 * time.Minute, set: onlyB, err: failWithdrawA,
			want: []reporttest.Event{ev(api, withdrawA), ev(web, withdrawA)}},
		{name: "the withdrawal succeeds", at: 13 * time.Minute, set: onlyB},
		{name: "once withdrawn, the address concerns no Service", at: 30 * time.Minute, set: onlyB, err: failWithdrawA},
	}
	rec := &reporttest.Recorder{}
	inner := plugintest.NewAnnouncer("tor")
	start := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	clock := runnertest.NewClock(start)
	a := report.New(inner, report.Options{Recorder: rec, Now: clock.Now})
	for _, s := range steps {
		clock.StepTo(start.Add(s.at))
		if s.err != nil {
			inner.FailNext(s.err)
		}
		if err := a.Announce(context.Background(), s.set); !errors.Is(err, s.err) {
			t.Fatalf("%s: Announce = %v, want the wrapped announcer's %v", s.name, err, s.err)
		}
		if diff := cmp.Diff(s.want, rec.Take()); diff != "" {
			t.Errorf("%s: Events (-want +got):\n%s", s.name, diff)
		}
	}
	if a.Name() != "tor" {
		t.Errorf("Name = %q, want the wrapped announcer's", a.Name())
	}
}

// TestResult covers an announcer working in the background: its
// failures arrive through Result, and a withdrawal stays pending until
// Result says it is done.
func TestResult(t *testing.T) {
	rec := &reporttest.Recorder{}
	clock := runnertest.NewClock(time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC))
	a := report.New(plugintest.NewAnnouncer("provider"), report.Options{Recorder: rec, Async: true, Now: clock.Now})
	ctx := context.Background()
	if err := a.Announce(ctx, []model.Announcement{{Addr: addrA, Service: web}}); err != nil {
		t.Fatal(err)
	}
	a.Result(addrA, false, errors.New("503 from the provider"))
	if err := a.Announce(ctx, nil); err != nil { // withdraw A
		t.Fatal(err)
	}
	a.Result(addrA, true, errors.New("timeout"))
	a.Result(addrA, true, nil) // done
	clock.Step(time.Hour)
	a.Result(addrA, true, errors.New("late")) // nobody's any more
	a.Result(addrB, false, errors.New("never announced"))
	want := []reporttest.Event{
		ev(web, "announcer provider failed to announce 192.0.2.1: 503 from the provider"),
		ev(web, "announcer provider failed to withdraw 192.0.2.1: timeout"),
	}
	if diff := cmp.Diff(want, rec.Take()); diff != "" {
		t.Errorf("Events (-want +got):\n%s", diff)
	}
}
