package membership

import "time"

// guardView is what the split-brain guard concludes from this daemon's
// view of the members at one moment. It is pure (judge), recomputed
// whenever a member changes and on Run's tick, and read by Alive.
type guardView struct {
	// quorum: a strict majority of the counted members is alive.
	quorum bool
	// cutOff: the counted members this daemon has not heard from
	// recently could form a strict majority without it. It may be the
	// one cut off by a partition, and that majority may have moved its
	// layer-2 addresses: it must not answer for them.
	cutOff bool
	// rejoining: this daemon was cut off less than a window ago. It
	// still announces nothing, so that the members that took its
	// addresses meanwhile, which see it back at once, have given them
	// up before it answers for them again.
	rejoining bool
	// fenced are the members declared dead less than the fence ago:
	// Alive still reports them alive, so that their addresses move only
	// once a member that is merely cut off has surely noticed (cutOff)
	// and stopped answering for them.
	fenced map[string]bool
	// held are the members that left saying they restart less than the
	// restart grace ago: Alive reports them alive (unless the guard has
	// no opinion of them: cut off, or exactly half alive), so that their
	// addresses stay where they are until they are back. For
	// the guard they count, neither alive nor heard, as a member just
	// declared dead does: one side of a partition cannot take a
	// majority from a member gone silent.
	held map[string]bool
}

// guardInput is what judge needs besides the members.
type guardInput struct {
	self string
	// heard is when each member last sent this daemon a packet (a probe,
	// an ack, gossip), or became alive, whichever is later.
	heard map[string]time.Time
	// notReady are the members whose Kubernetes Node is not Ready: dead
	// and NotReady, a member is gone for good and no longer counts.
	notReady map[string]bool
	// cutOffAt is when this daemon was last found cut off (zero: never).
	cutOffAt time.Time
	// probeInterval and suspicionMult are the failure detector's
	// (Timing): they give the window (window).
	probeInterval time.Duration
	suspicionMult int
	// restartGrace is how long a member that left saying it restarts is
	// held (Config.RestartGrace); past it, it is dead since the grace
	// ended.
	restartGrace time.Duration
}

// window is both how recently a member must have sent a packet to count
// as heard and how long a death is fenced: 2 x max(SuspicionMult,
// members) probe intervals. A daemon probes one member per interval in
// turn (slower when Lifeguard finds it degraded), so each member probes
// this one and is probed by it about every members-1 intervals: a live
// one is heard well within the window. A member cut off stops hearing
// the others within about one window (cutOff), while the others
// declare it dead after at least SuspicionMult+1 intervals and then wait
// the fence before they move its addresses: it has stopped answering for
// them first, with about SuspicionMult intervals to spare for its sync.
func (in guardInput) window(members int) time.Duration {
	return 2 * time.Duration(max(in.suspicionMult, members)) * in.probeInterval
}

// judge returns the guard's view of members at now. Counted are the
// members that did not leave and are not both dead (or restarting) and
// NotReady in Kubernetes, this daemon included.
func judge(members map[string]Member, in guardInput, now time.Time) guardView {
	v := guardView{}
	silent := func(m Member) bool { return m.State == StateDead || m.State == StateRestarting }
	counts := func(name string, m Member) bool {
		return m.State != StateLeft && (!silent(m) || !in.notReady[name])
	}
	counted := 0
	for name, m := range members {
		if counts(name, in.settled(m, now)) {
			counted++
		}
	}
	window := in.window(counted)
	alive, heard := 0, 0
	for name, m := range members {
		m = in.settled(m, now)
		if !counts(name, m) {
			continue
		}
		if m.State == StateRestarting {
			if v.held == nil {
				v.held = map[string]bool{}
			}
			v.held[name] = true
			continue
		}
		if m.State == StateDead {
			if now.Sub(m.Since) < window {
				if v.fenced == nil {
					v.fenced = map[string]bool{}
				}
				v.fenced[name] = true
			}
			continue
		}
		alive++
		if name == in.self || now.Sub(in.heard[name]) <= window {
			heard++
		}
	}
	v.quorum = 2*alive > counted
	v.cutOff = 2*(counted-heard) > counted
	v.rejoining = !v.cutOff && !in.cutOffAt.IsZero() && now.Sub(in.cutOffAt) < window
	return v
}

// settled returns m as judge takes it at now: a member that said it
// restarts is dead once its grace has passed, since the grace ended.
func (in guardInput) settled(m Member, now time.Time) Member {
	if m.State == StateRestarting && now.Sub(m.Since) >= in.restartGrace {
		m.State, m.Since = StateDead, m.Since.Add(in.restartGrace)
	}
	return m
}

// equal reports whether two views would answer Alive alike.
func (v guardView) equal(o guardView) bool {
	return v.quorum == o.quorum && v.cutOff == o.cutOff && v.rejoining == o.rejoining &&
		sameSet(v.fenced, o.fenced) && sameSet(v.held, o.held)
}

func sameSet(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for name := range a {
		if !b[name] {
			return false
		}
	}
	return true
}

// alive is Alive's answer for node under view v, given its member
// record (ok: there is one); guard off, gossip is trusted as it is.
func (v guardView) alive(guard bool, self, node string, m Member, ok bool) (alive, known bool) {
	switch {
	case ok && v.held[node] && (!guard || !v.cutOff && v.quorum):
		// Restarting within its grace: its addresses stay. (Cut off, or
		// with exactly half alive, the guard's answers below hold.)
		return true, true
	case !guard:
	case v.cutOff:
		// Probably on the minority side of a partition: this node
		// announces no layer-2 address, and has no opinion of the
		// others (Kubernetes readiness decides for them).
		if node == self {
			return false, true
		}
		return false, false
	case v.rejoining && node == self:
		return false, true
	case !v.quorum:
		// Exactly half alive: neither side of a partition can have a
		// majority, so every node falls back to Kubernetes readiness and
		// both sides elect alike.
		return false, false
	case ok && v.fenced[node]:
		return true, true
	}
	if !ok {
		return false, false
	}
	return m.State == StateAlive, true
}
