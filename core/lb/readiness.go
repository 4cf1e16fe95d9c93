package lb

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// announcerCheck is one announcer's part of /readyz.
type announcerCheck struct {
	name string
	// probe returns why the announcer cannot do its job on this node.
	probe func() error
	// grace is how long probe must keep failing before the pod is unready.
	grace func() time.Duration
}

// announcerHealth is the "announcers" check of /readyz. What makes the
// pod unready is an announcer that cannot announce from this node at
// all, for longer than a transient failure lasts:
//
//   - BGP: no session established with any of its peers (a peer waiting
//     for its password Secret counts as down) for longer than the longest
//     hold time of its peers: a router that lost this node withdraws its
//     routes after the hold time, so past it the node attracts nothing.
//   - ARP: an interface it answers on is gone or down, or its socket's
//     reads keep failing, for longer than arpGrace: the addresses this
//     node wins on that subnet are not answered.
//
// The cloud announcer never makes the pod unready: the provider is one
// service shared by every node, so its outage would turn the whole
// DaemonSet unready without telling which node is at fault; its
// failures are AnnounceFailed Events. Readiness moves no traffic here
// (no Service selects the daemon's pods and liveness is /livez): it is
// what `kubectl get pods` shows and what stops a DaemonSet rollout whose
// new pods cannot announce.
//
// A failure is timed from the first /readyz that saw it (the kubelet
// probes every few seconds).
type announcerHealth struct {
	now    func() time.Time
	checks []announcerCheck

	mu    sync.Mutex
	since map[string]time.Time // first failing probe, by announcer
}

func newAnnouncerHealth(now func() time.Time) *announcerHealth {
	if now == nil {
		now = time.Now
	}
	return &announcerHealth{now: now, since: map[string]time.Time{}}
}

func (h *announcerHealth) add(c announcerCheck) { h.checks = append(h.checks, c) }

// err returns why the pod is not ready, naming each announcer at fault;
// nil when none is.
func (h *announcerHealth) err() error {
	if h == nil {
		return nil
	}
	now := h.now()
	var errs []error
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.checks {
		err := c.probe()
		if err == nil {
			delete(h.since, c.name)
			continue
		}
		since, ok := h.since[c.name]
		if !ok {
			since = now
			h.since[c.name] = now
		}
		if d := now.Sub(since); d >= c.grace() {
			errs = append(errs, fmt.Errorf("announcer %s, for %s: %w", c.name, d.Round(time.Second), err))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("announcers: %w", errors.Join(errs...))
}
