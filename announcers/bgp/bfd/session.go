package bfd

import (
	"math/rand/v2"
	"time"
)

// SlowTx is the least transmission interval while a session is not Up
// (RFC 5880 §6.8.3).
const SlowTx = time.Second

// Timers are a session's wanted intervals: DesiredMinTx and RequiredMinRx
// are bfd.DesiredMinTxInterval and bfd.RequiredMinRxInterval while Up,
// DetectMult is bfd.DetectMult.
type Timers struct {
	DesiredMinTx, RequiredMinRx time.Duration
	DetectMult                  uint8
}

// Change is a session state change.
type Change struct {
	From, To State
	// Diag is the local diagnostic: why the session left Up or Init.
	Diag Diag
	// RemoteRestart marks a Down caused by the remote system starting a
	// new session (a Down packet with a new discriminator), not a failure
	// of the path.
	RemoteRestart bool
	// RemoteAdminDown marks a Down caused by the remote system's
	// AdminDown, which RFC 5882 §3.2 says is not a failure either.
	RemoteAdminDown bool
	// RemoteDiag is the remote's diagnostic when it said Down.
	RemoteDiag Diag
}

// Failure reports whether c is an Up session going down for a reason
// that means the forwarding path failed: detection time expired here, or
// the remote said Down with a diagnostic naming a failure it detected
// (its detection time expired, a path down...). A remote Down without a
// diagnostic, or with "neighbor signaled session down" while this
// session was Up (it signaled no such thing), is a session the remote
// reset: FRR's bfdd does so once BGP is up, when bgpd registers the
// session again with its local address.
func (c Change) Failure() bool {
	if c.From != Up || c.To != Down || c.RemoteRestart || c.RemoteAdminDown {
		return false
	}
	if c.Diag == DiagNeighborDown {
		switch c.RemoteDiag {
		case DiagNone, DiagNeighborDown, DiagAdminDown:
			return false
		}
	}
	return true
}

// Output is what a Session wants done after an input: packets to send at
// once, in order, and its state change, if any.
type Output struct {
	Send   []Packet
	Change *Change
}

// Session is the state machine of one BFD session in asynchronous mode,
// in the active role. It is pure: every input carries the time, and Next
// says when it needs to be called again. Not safe for concurrent use.
type Session struct {
	timers Timers
	jitter func(interval time.Duration) time.Duration

	state       State
	localDiscr  uint32
	localDiag   Diag
	remoteDiscr uint32
	remoteState State
	// remoteMinRx is bfd.RemoteMinRxInterval; remoteTx and remoteMult the
	// last received Desired Min TX Interval and Detect Mult.
	remoteMinRx time.Duration
	remoteTx    time.Duration
	remoteMult  uint8

	// advTx and advRx are what packets carry (bfd.DesiredMinTxInterval,
	// bfd.RequiredMinRxInterval); txUsed and rxUsed are what the timers
	// use, which lag behind them during a Poll Sequence (§6.8.3).
	advTx, advRx   time.Duration
	txUsed, rxUsed time.Duration
	polling        bool
	pendingFinal   bool

	lastTx, nextTx time.Time
	schedIv        time.Duration // the interval nextTx was drawn from
	detectAt       time.Time     // zero: no detection timer
}

// NewSession returns a session in Down with local discriminator discr
// (non-zero, unique on this system) that sends its first packet at now.
// jitter, when nil, is the RFC's: each interval reduced by a random 0-25%
// (10-25% with a detect multiplier of 1); tests pass their own.
func NewSession(now time.Time, discr uint32, t Timers, jitter func(interval time.Duration) time.Duration) *Session {
	s := &Session{timers: t, localDiscr: discr, state: Down, remoteState: Down, remoteMinRx: time.Microsecond, nextTx: now}
	if jitter == nil {
		jitter = rfcJitter(t.DetectMult)
	}
	s.jitter = jitter
	s.advTx, s.advRx = s.wantIntervals()
	s.txUsed, s.rxUsed = s.advTx, s.advRx
	return s
}

// rfcJitter is RFC 5880 §6.8.7's jitter.
func rfcJitter(mult uint8) func(time.Duration) time.Duration {
	return func(d time.Duration) time.Duration {
		lo := 75
		hi := 100
		if mult == 1 {
			hi = 90
		}
		pct := lo + rand.IntN(hi-lo+1)
		return d * time.Duration(pct) / 100
	}
}

// wantIntervals is bfd.DesiredMinTxInterval and bfd.RequiredMinRxInterval
// for the current state: the transmission interval is at least SlowTx
// while not Up.
func (s *Session) wantIntervals() (tx, rx time.Duration) {
	tx = s.timers.DesiredMinTx
	if s.state != Up {
		tx = max(tx, SlowTx)
	}
	return tx, s.timers.RequiredMinRx
}

// State returns the session state.
func (s *Session) State() State { return s.state }

// Status is a read-only view of a session for metrics and debugging.
type Status struct {
	State       State
	LocalDiag   Diag
	RemoteState State
	LocalDiscr  uint32
	RemoteDiscr uint32
	// TxInterval is the negotiated transmission interval before jitter
	// (zero: the remote asked for no packets), DetectionTime the time
	// without packets after which the session goes down.
	TxInterval, DetectionTime time.Duration
	Polling                   bool
}

// Status returns the session's current view.
func (s *Session) Status() Status {
	return Status{
		State: s.state, LocalDiag: s.localDiag, RemoteState: s.remoteState,
		LocalDiscr: s.localDiscr, RemoteDiscr: s.remoteDiscr,
		TxInterval: s.txInterval(), DetectionTime: s.detectionTime(), Polling: s.polling,
	}
}

// Next returns when the session must next be given the time (Advance):
// its next transmission or detection timeout, whichever is first.
func (s *Session) Next() time.Time {
	n := s.nextTx
	if !s.detectAt.IsZero() && (n.IsZero() || s.detectAt.Before(n)) {
		n = s.detectAt
	}
	return n
}

// DetectionDeadline returns when the session goes down unless a packet
// arrives first; zero when no detection timer runs.
func (s *Session) DetectionDeadline() time.Time { return s.detectAt }

// txInterval is the interval between periodic packets before jitter:
// the larger of what this system wants and what the remote accepts;
// zero when the remote asked for none.
func (s *Session) txInterval() time.Duration {
	if s.remoteMinRx == 0 {
		return 0
	}
	return max(s.txUsed, s.remoteMinRx)
}

// detectionTime is the remote's detect multiplier times the larger of
// what this system accepts and what the remote last said it sends.
func (s *Session) detectionTime() time.Duration {
	return time.Duration(s.remoteMult) * max(s.rxUsed, s.remoteTx)
}

// Advance gives the session the time: it expires the detection timer and
// sends the periodic packet when they are due.
func (s *Session) Advance(now time.Time) Output {
	var out Output
	if !s.detectAt.IsZero() && !now.Before(s.detectAt) {
		s.detectAt = time.Time{}
		// §6.8.1: bfd.RemoteDiscr is zeroed when a Detection Time passes
		// without a packet; §6.8.4: Init or Up go Down.
		s.remoteDiscr = 0
		s.remoteState = Down
		if s.state == Init || s.state == Up {
			out.Change = s.setState(now, Down, DiagDetectionExpired)
			s.nextTx = now // tell the remote at once
		}
	}
	if !s.nextTx.IsZero() && !now.Before(s.nextTx) {
		out.Send = append(out.Send, s.packet())
		s.sent(now)
	}
	return out
}

// sent records a transmission at now and schedules the next one.
func (s *Session) sent(now time.Time) {
	s.lastTx = now
	s.pendingFinal = false
	s.schedIv = s.txInterval()
	if s.schedIv > 0 {
		s.nextTx = now.Add(s.jitter(s.schedIv))
	} else {
		s.nextTx = time.Time{}
	}
}

// reschedule moves the next transmission when the interval changed: a
// shorter one keeps the remote's (shorter) detection time, a longer one
// respects what the remote accepts (§6.8.7).
func (s *Session) reschedule() {
	iv := s.txInterval()
	if iv == s.schedIv || s.lastTx.IsZero() {
		return // unchanged, or the first packet is already due
	}
	s.schedIv = iv
	if iv == 0 {
		s.nextTx = time.Time{}
		return
	}
	s.nextTx = s.lastTx.Add(s.jitter(iv))
}

// packet is the Control packet to send now.
func (s *Session) packet() Packet {
	p := Packet{
		Diag: s.localDiag, State: s.state, DetectMult: s.timers.DetectMult,
		MyDiscriminator: s.localDiscr, YourDiscriminator: s.remoteDiscr,
		DesiredMinTx: s.advTx, RequiredMinRx: s.advRx,
	}
	if s.pendingFinal {
		p.Final = true
	} else if s.polling {
		p.Poll = true
	}
	return p
}

// Receive processes a Control packet that the codec accepted and the
// caller demultiplexed to this session (§6.8.6). A packet of a replaced
// remote session is ignored.
func (s *Session) Receive(now time.Time, p Packet) Output {
	var out Output
	if s.state == AdminDown {
		return out
	}
	restart := false
	if s.remoteDiscr != 0 && p.MyDiscriminator != s.remoteDiscr {
		if p.YourDiscriminator != 0 {
			// The remote's earlier session, still addressing us after a
			// new one took over: not ours any more.
			return out
		}
		restart = true
	}
	s.remoteDiscr = p.MyDiscriminator
	s.remoteState = p.State
	s.remoteMinRx = p.RequiredMinRx
	s.remoteTx = p.DesiredMinTx
	s.remoteMult = p.DetectMult
	if p.Final && s.polling {
		s.polling = false
		s.txUsed, s.rxUsed = s.advTx, s.advRx
	}
	s.detectAt = now.Add(s.detectionTime())

	switch {
	case p.State == AdminDown:
		if s.state != Down {
			out.Change = s.setState(now, Down, DiagNeighborDown)
			out.Change.RemoteAdminDown, out.Change.RemoteDiag = true, p.Diag
		}
	case s.state == Down && p.State == Down:
		out.Change = s.setState(now, Init, DiagNone)
	case s.state == Down && p.State == Init:
		out.Change = s.setState(now, Up, DiagNone)
	case s.state == Init && (p.State == Init || p.State == Up):
		out.Change = s.setState(now, Up, DiagNone)
	case s.state == Up && p.State == Down:
		out.Change = s.setState(now, Down, DiagNeighborDown)
		out.Change.RemoteRestart, out.Change.RemoteDiag = restart, p.Diag
	}
	if p.Poll {
		s.pendingFinal = true
	}
	s.reschedule()
	// Answer a Poll at once (§6.8.7), and tell a state change at once
	// rather than at the next periodic packet.
	if s.pendingFinal || out.Change != nil {
		out.Send = append(out.Send, s.packet())
		s.pendingFinal = false
	}
	return out
}

// setState moves the session to st and starts a Poll Sequence when that
// changes its advertised intervals (§6.8.3).
func (s *Session) setState(now time.Time, st State, diag Diag) *Change {
	c := &Change{From: s.state, To: st, Diag: diag}
	s.state = st
	if st != Up {
		s.localDiag = diag
	}
	s.retime()
	return c
}

// retime recomputes the advertised intervals after a state or timer
// change. While Up, a larger transmission interval and a smaller receive
// interval take effect only once the remote answered the Poll (§6.8.3);
// otherwise the new values apply at once.
func (s *Session) retime() {
	tx, rx := s.wantIntervals()
	if tx == s.advTx && rx == s.advRx {
		return
	}
	s.advTx, s.advRx = tx, rx
	s.polling = true
	switch {
	case s.state != Up:
		s.txUsed, s.rxUsed = tx, rx
	default:
		s.txUsed = min(s.txUsed, tx)
		s.rxUsed = max(s.rxUsed, rx)
	}
	s.reschedule()
}

// SetTimers changes the session's wanted intervals and multiplier; a Poll
// Sequence tells the remote.
func (s *Session) SetTimers(t Timers) {
	s.timers = t
	s.retime()
}

// Shutdown puts the session in AdminDown (diag 7) and returns the packet
// telling the remote, which RFC 5882 §3.2 says must not treat it as a
// failure. The session then sends and accepts nothing.
func (s *Session) Shutdown(now time.Time) Output {
	if s.state == AdminDown {
		return Output{}
	}
	c := &Change{From: s.state, To: AdminDown, Diag: DiagAdminDown}
	s.state, s.localDiag = AdminDown, DiagAdminDown
	s.polling, s.pendingFinal = false, false
	p := s.packet()
	s.nextTx, s.detectAt = time.Time{}, time.Time{}
	return Output{Send: []Packet{p}, Change: c}
}
