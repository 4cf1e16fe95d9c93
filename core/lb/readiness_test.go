package lb

import (
	"errors"
	"testing"
	"time"

	"github.com/switchyard-lb/switchyard/announcers/bgp"
	"github.com/switchyard-lb/switchyard/core/runner/runnertest"
)

// TestAnnouncerHealth steps a fake clock through failures of two
// announcers: each turns the pod unready only once it has failed for its
// grace, and recovering resets its clock.
func TestAnnouncerHealth(t *testing.T) {
	start := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	clock := runnertest.NewClock(start)
	var bgpErr, arpErr error
	h := newAnnouncerHealth(clock.Now)
	h.add(announcerCheck{name: "tor", probe: func() error { return bgpErr }, grace: func() time.Duration { return 90 * time.Second }})
	h.add(announcerCheck{name: "l2", probe: func() error { return arpErr }, grace: func() time.Duration { return 10 * time.Second }})
	noSession := errors.New("no bgp session established (1 peers configured)")
	gone := errors.New("interface eth1 (index 3) is gone")
	steps := []struct {
		name     string
		at       time.Duration
		bgp, arp error
		want     string
	}{
		{name: "healthy", at: 0},
		{name: "bgp fails: within its hold time", at: time.Second, bgp: noSession},
		{name: "arp fails too: within its grace", at: 5 * time.Second, bgp: noSession, arp: gone},
		{name: "arp past its grace", at: 15 * time.Second, bgp: noSession, arp: gone,
			want: "announcers: announcer l2, for 10s: interface eth1 (index 3) is gone"},
		{name: "both past their grace", at: 91 * time.Second, bgp: noSession, arp: gone,
			want: "announcers: announcer tor, for 1m30s: no bgp session established (1 peers configured)\nannouncer l2, for 1m26s: interface eth1 (index 3) is gone"},
		{name: "bgp recovers", at: 92 * time.Second, arp: gone,
			want: "announcers: announcer l2, for 1m27s: interface eth1 (index 3) is gone"},
		{name: "bgp fails again: its clock restarted", at: 100 * time.Second, bgp: noSession},
	}
	for _, s := range steps {
		clock.StepTo(start.Add(s.at))
		bgpErr, arpErr = s.bgp, s.arp
		got := ""
		if err := h.err(); err != nil {
			got = err.Error()
		}
		if got != s.want {
			t.Errorf("%s: err = %q, want %q", s.name, got, s.want)
		}
	}
	var none *announcerHealth
	if err := none.err(); err != nil {
		t.Errorf("a daemon without announcers: err = %v, want nil", err)
	}
}

func TestMaxHoldTime(t *testing.T) {
	if got := maxHoldTime([]bgp.Peer{{HoldTime: 9 * time.Second}, {HoldTime: 30 * time.Second}}); got != 30*time.Second {
		t.Errorf("maxHoldTime = %v, want 30s", got)
	}
	if got := maxHoldTime([]bgp.Peer{{HoldTime: 9 * time.Second}, {}}); got != bgp.DefaultHoldTime {
		t.Errorf("maxHoldTime with an unset hold time = %v, want the default %v", got, bgp.DefaultHoldTime)
	}
}
