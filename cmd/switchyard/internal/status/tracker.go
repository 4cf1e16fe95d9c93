package status

import (
	"sync"
	"time"
)

// SyncTracker follows pending and applied changes the way kube-proxy's
// proxier health server does: the daemon is healthy while nothing is
// pending, or while the oldest pending change is younger than the timeout
// (kube-proxy uses twice the sync period). It also keeps whether the node
// is eligible for traffic (not being deleted, KEP-3836), which /healthz
// reports beside. It is goroutine-safe.
type SyncTracker struct {
	timeout time.Duration
	now     func() time.Time

	mu             sync.Mutex
	oldestPending  time.Time
	lastUpdated    time.Time
	nodeIneligible bool
}

// NewSyncTracker returns a tracker with nothing pending and the node
// eligible. now nil means time.Now.
func NewSyncTracker(timeout time.Duration, now func() time.Time) *SyncTracker {
	if now == nil {
		now = time.Now
	}
	return &SyncTracker{timeout: timeout, now: now}
}

// SetNodeEligible records whether the node may receive traffic: false
// while its Node is being deleted. A node is eligible until told
// otherwise, as with kube-proxy while it starts.
func (t *SyncTracker) SetNodeEligible(eligible bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.nodeIneligible = !eligible
}

// Queued records that a change is waiting to be applied.
func (t *SyncTracker) Queued() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.oldestPending.IsZero() {
		t.oldestPending = t.now()
	}
}

// Updated records that a sync which started at start applied everything
// queued before it; changes queued during the sync stay pending.
func (t *SyncTracker) Updated(start time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lastUpdated = t.now()
	if !t.oldestPending.After(start) {
		t.oldestPending = time.Time{}
	}
}

// Health is what /healthz reports.
type Health struct {
	// Healthy: the daemon keeps up with changes (what a
	// healthCheckNodePort answer also depends on).
	Healthy bool
	// NodeEligible: the node is not being deleted. /healthz requires
	// both.
	NodeEligible bool
	LastUpdated  time.Time
	CurrentTime  time.Time
}

// Health reports whether the daemon keeps up with changes, and whether
// the node is eligible.
func (t *SyncTracker) Health() Health {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	healthy := t.oldestPending.IsZero() || now.Sub(t.oldestPending) < t.timeout
	return Health{Healthy: healthy, NodeEligible: !t.nodeIneligible, LastUpdated: t.lastUpdated, CurrentTime: now}
}
