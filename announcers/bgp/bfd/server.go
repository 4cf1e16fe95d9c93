package bfd

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/switchyard-lb/switchyard/core/runner"
)

// Peer configures one session.
type Peer struct {
	Addr netip.Addr
	// Multihop runs the session on RFC 5883's port; MinTTL is then the
	// least TTL accepted (zero: any). Single hop requires TTL 255.
	Multihop bool
	MinTTL   uint8
	Timers   Timers
}

func (p Peer) validate() error {
	var errs []error
	if !p.Addr.IsValid() {
		errs = append(errs, errors.New("peer address is required"))
	}
	t := p.Timers
	if t.DesiredMinTx <= 0 || t.RequiredMinRx <= 0 {
		errs = append(errs, fmt.Errorf("intervals must be positive (minTx %s, minRx %s)", t.DesiredMinTx, t.RequiredMinRx))
	}
	if t.DetectMult == 0 {
		errs = append(errs, errors.New("detect multiplier must be at least 1"))
	}
	return errors.Join(errs...)
}

// SessionStatus is a session's view for metrics and /debug/state.
type SessionStatus struct {
	Peer     netip.Addr
	Multihop bool
	Status
	// LastChange is when the session last changed state; Downs counts
	// its Up to Down transitions; Received, Sent and SendErrors its packets.
	LastChange    time.Time
	Downs         uint64
	Received      uint64
	Sent          uint64
	SendErrors    uint64
	LastSendError string
}

// Options configure a Server.
type Options struct {
	// Clock is the time source; default the real clock.
	Clock runner.Clock
	// OnChange, when set, is called on the Server's goroutine after every
	// state change of a session; it must not block.
	OnChange func(peer netip.Addr, c Change)
	// Jitter replaces RFC 5880's jitter (tests).
	Jitter func(time.Duration) time.Duration
}

// Server runs the BFD sessions of configured peers.
type Server struct {
	tr   Transport
	opts Options
	wake chan struct{}
	in   chan Datagram

	mu        sync.Mutex
	sessions  map[sessionKey]*entry
	byDiscr   map[uint32]*entry
	discarded uint64
	closed    bool
}

type sessionKey struct {
	addr     netip.Addr
	multihop bool
}

type entry struct {
	peer Peer
	s    *Session
	tx   Sender
	st   SessionStatus
	// grace, when set, is until when a detection expiry the server woke
	// up late for waits for packets that may have arrived meanwhile.
	grace time.Time
}

// LateWake and ReceiveGrace guard against a starved process: when the
// server runs more than LateWake after a session's detection deadline,
// the process (not the path) may have been stalled, with the peer's
// packets waiting in the socket; the expiry then waits ReceiveGrace,
// once, for the receive path to deliver them. A session whose peer did
// go silent goes down at most ReceiveGrace later.
const (
	LateWake     = 50 * time.Millisecond
	ReceiveGrace = 50 * time.Millisecond
)

// NewServer returns a Server on tr; Run runs its sessions.
func NewServer(tr Transport, opts Options) *Server {
	if opts.Clock == nil {
		opts.Clock = runner.SystemClock
	}
	return &Server{
		tr: tr, opts: opts, wake: make(chan struct{}, 1), in: make(chan Datagram, 64),
		sessions: map[sessionKey]*entry{}, byDiscr: map[uint32]*entry{},
	}
}

// Add starts a session with p. A second session with the same address
// and hop type is an error.
func (s *Server) Add(p Peer) error {
	if err := p.validate(); err != nil {
		return fmt.Errorf("bfd peer %s: %w", p.Addr, err)
	}
	p.Addr = p.Addr.Unmap()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("bfd server is closed")
	}
	k := sessionKey{p.Addr, p.Multihop}
	if _, dup := s.sessions[k]; dup {
		return fmt.Errorf("bfd peer %s: session exists", p.Addr)
	}
	tx, err := s.tr.Open(p.Addr, p.Multihop)
	if err != nil {
		return fmt.Errorf("bfd peer %s: %w", p.Addr, err)
	}
	discr := s.newDiscr()
	now := s.opts.Clock.Now()
	e := &entry{peer: p, tx: tx, s: NewSession(now, discr, p.Timers, s.opts.Jitter)}
	e.st = SessionStatus{Peer: p.Addr, Multihop: p.Multihop, LastChange: now}
	s.sessions[k] = e
	s.byDiscr[discr] = e
	s.poke()
	return nil
}

// newDiscr picks a random unused non-zero discriminator.
func (s *Server) newDiscr() uint32 {
	for {
		d := rand.Uint32()
		if _, used := s.byDiscr[d]; d != 0 && !used {
			return d
		}
	}
}

func (s *Server) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Sessions returns every session's status, sorted by peer.
func (s *Server) Sessions() []SessionStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]SessionStatus, 0, len(s.sessions))
	for _, e := range s.sessions {
		st := e.st
		st.Status = e.s.Status()
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b SessionStatus) int {
		if c := a.Peer.Compare(b.Peer); c != 0 {
			return c
		}
		if a.Multihop == b.Multihop {
			return 0
		}
		if a.Multihop {
			return 1
		}
		return -1
	})
	return out
}

// Discarded returns how many received datagrams were refused (codec,
// TTL, or no session).
func (s *Server) Discarded() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.discarded
}

// Run runs the sessions until ctx ends, then sends each remote an
// AdminDown and closes the transport.
func (s *Server) Run(ctx context.Context) error {
	stop := make(chan struct{})
	go s.receive(stop)
	defer s.shutdown()
	defer close(stop)
	for {
		var changes []notice
		s.mu.Lock()
		now := s.opts.Clock.Now()
		var next time.Time
		for _, e := range s.sessions {
			if d := e.s.DetectionDeadline(); e.grace.IsZero() && !d.IsZero() && now.Sub(d) > LateWake {
				e.grace = now.Add(ReceiveGrace)
			}
			if !e.grace.IsZero() && now.Before(e.grace) {
				if next.IsZero() || e.grace.Before(next) {
					next = e.grace
				}
				continue // the detection waits for what the receive path holds
			}
			e.grace = time.Time{}
			if n := e.s.Next(); !n.IsZero() && !now.Before(n) {
				changes = s.apply(e, now, e.s.Advance(now), changes)
			}
			if n := e.s.Next(); !n.IsZero() && (next.IsZero() || n.Before(next)) {
				next = n
			}
		}
		s.mu.Unlock()
		s.notify(changes)

		var timer runner.Timer
		var fire <-chan time.Time
		if !next.IsZero() {
			timer = s.opts.Clock.NewTimer(next.Sub(now))
			fire = timer.C()
		}
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return nil
		case <-fire:
		case <-s.wake:
		case d, ok := <-s.in:
			if !ok {
				if timer != nil {
					timer.Stop()
				}
				return errors.New("bfd transport closed")
			}
			s.handle(d)
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

type notice struct {
	peer netip.Addr
	c    Change
}

// apply sends out's packets and records its change; s.mu is held.
func (s *Server) apply(e *entry, now time.Time, out Output, changes []notice) []notice {
	for _, p := range out.Send {
		if err := e.tx.Send(p.Marshal()); err != nil {
			e.st.SendErrors++
			e.st.LastSendError = err.Error()
		} else {
			e.st.Sent++
		}
	}
	if c := out.Change; c != nil {
		e.st.LastChange = now
		if c.From == Up {
			e.st.Downs++
		}
		changes = append(changes, notice{e.peer.Addr, *c})
	}
	return changes
}

func (s *Server) notify(changes []notice) {
	if s.opts.OnChange == nil {
		return
	}
	for _, n := range changes {
		s.opts.OnChange(n.peer, n.c)
	}
}

// receive feeds Run with the transport's datagrams until the transport
// fails or Run returns.
func (s *Server) receive(stop <-chan struct{}) {
	defer close(s.in)
	for {
		d, err := s.tr.Receive()
		if err != nil {
			return
		}
		select {
		case s.in <- d:
		case <-stop:
			return
		}
	}
}

// handle demultiplexes and processes one datagram (RFC 5880 §6.8.6).
func (s *Server) handle(d Datagram) {
	p, err := Unmarshal(d.Payload)
	s.mu.Lock()
	if err != nil {
		s.discarded++
		s.mu.Unlock()
		return
	}
	src := d.Src.Addr().Unmap()
	var e *entry
	if p.YourDiscriminator != 0 {
		e = s.byDiscr[p.YourDiscriminator]
		if e != nil && (e.peer.Addr != src || e.peer.Multihop != d.Multihop) {
			e = nil
		}
	} else {
		e = s.sessions[sessionKey{src, d.Multihop}]
	}
	if e == nil || !ttlOK(e.peer, d.TTL) {
		s.discarded++
		s.mu.Unlock()
		return
	}
	e.st.Received++
	now := s.opts.Clock.Now()
	changes := s.apply(e, now, e.s.Receive(now, p), nil)
	s.mu.Unlock()
	s.notify(changes)
}

// ttlOK applies RFC 5881 §5 (single hop: TTL 255) and RFC 5883 §5
// (multihop: at least the configured minimum). An unknown TTL passes.
func ttlOK(p Peer, ttl uint8) bool {
	if ttl == 0 {
		return true
	}
	if p.Multihop {
		return ttl >= p.MinTTL
	}
	return ttl == TTL
}

// shutdown sends AdminDown on every session and closes the transport.
func (s *Server) shutdown() {
	s.mu.Lock()
	s.closed = true
	now := s.opts.Clock.Now()
	var changes []notice
	for _, e := range s.sessions {
		changes = s.apply(e, now, e.s.Shutdown(now), changes)
		e.tx.Close()
	}
	s.mu.Unlock()
	s.notify(changes)
	s.tr.Close()
}
