package bgp

import (
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	api "github.com/osrg/gobgp/v3/api"

	"github.com/switchyard-lb/switchyard/announcers/bgp/bfd"
)

// Option configures a Speaker beyond its Config.
type Option func(*options)

type options struct {
	bfdTransport bfd.Transport
}

// WithBFDTransport runs the peers' BFD sessions over t instead of the
// host's UDP sockets (bfd.ListenUDP); the Speaker closes it.
func WithBFDTransport(t bfd.Transport) Option {
	return func(o *options) { o.bfdTransport = t }
}

// bfdLink couples the BFD sessions to the BGP peers: a session's failure
// disables the peer in GoBGP (a Cease NOTIFICATION, the routes gone from
// the peer at once); the peer is enabled again when the session is Up
// again, or after its hold time if BFD does not come back (the peer may
// have stopped running BFD: the hold timer then guards the session as
// without BFD). State changes queue from the BFD server's goroutine and
// are acted on by one goroutine of their own, as GoBGP calls may block.
type bfdLink struct {
	srv    *bfd.Server
	log    *slog.Logger
	cancel context.CancelFunc
	done   chan struct{} // the server and the worker have returned

	mu     sync.Mutex
	queue  []bfdEvent
	signal chan struct{}
}

type bfdEvent struct {
	peer    netip.Addr
	change  bfd.Change
	release bool // the hold-time fallback of a disabled peer
	gen     uint64
}

// startBFD starts BFD for the peers that configure it; nil when none does.
func (s *Speaker) startBFD(log *slog.Logger, o options) error {
	var peers []bfd.Peer
	multihop := false
	for _, p := range s.cfg.Peers {
		if p.BFD == nil {
			continue
		}
		bp := bfd.Peer{Addr: p.Address, Timers: bfd.Timers{DesiredMinTx: p.BFD.MinTx, RequiredMinRx: p.BFD.MinRx, DetectMult: p.BFD.Multiplier}}
		if p.EBGPMultihopTTL > 0 {
			// A TTL of n allows n-1 routers on the way.
			bp.Multihop, bp.MinTTL = true, uint8(256-int(p.EBGPMultihopTTL))
			multihop = true
		}
		peers = append(peers, bp)
	}
	if len(peers) == 0 {
		return nil
	}
	tr := o.bfdTransport
	if tr == nil {
		udp, err := bfd.ListenUDP(multihop)
		if err != nil {
			return err
		}
		tr = udp
	}
	l := &bfdLink{log: log, signal: make(chan struct{}, 1), done: make(chan struct{})}
	l.srv = bfd.NewServer(tr, bfd.Options{OnChange: l.enqueue})
	for _, p := range peers {
		if err := l.srv.Add(p); err != nil {
			tr.Close()
			return err
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	s.bfd = l
	var wg sync.WaitGroup
	wg.Go(func() { l.srv.Run(ctx) })
	wg.Go(func() { s.bfdWorker(ctx) })
	go func() { wg.Wait(); close(l.done) }()
	return nil
}

func (l *bfdLink) enqueue(peer netip.Addr, c bfd.Change) {
	l.push(bfdEvent{peer: peer, change: c})
}

func (l *bfdLink) push(e bfdEvent) {
	l.mu.Lock()
	l.queue = append(l.queue, e)
	l.mu.Unlock()
	select {
	case l.signal <- struct{}{}:
	default:
	}
}

// stop ends the BFD sessions, telling each peer AdminDown.
func (l *bfdLink) stop() {
	l.cancel()
	<-l.done
}

// bfdWorker acts on the BFD state changes in order.
func (s *Speaker) bfdWorker(ctx context.Context) {
	l := s.bfd
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.signal:
		}
		l.mu.Lock()
		q := l.queue
		l.queue = nil
		l.mu.Unlock()
		for _, e := range q {
			s.onBFD(ctx, e)
		}
	}
}

// onBFD disables a peer whose BFD session failed and enables it again.
func (s *Speaker) onBFD(ctx context.Context, e bfdEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	i := slices.IndexFunc(s.cfg.Peers, func(p Peer) bool { return p.Address == e.peer })
	if i < 0 {
		return
	}
	p := s.cfg.Peers[i]
	c := e.change
	if !e.release && c.From == bfd.Up && c.To == bfd.Down && !c.Failure() {
		s.bfd.log.Info("bfd session down, not a failure: bgp session kept", "peer", e.peer,
			"remoteDiag", c.RemoteDiag.String(), "remoteRestart", c.RemoteRestart, "remoteAdminDown", c.RemoteAdminDown)
	}
	switch {
	case !e.release && c.Failure() && !s.bfdHeld[e.peer]:
		s.bfdHeld[e.peer] = true
		s.bfdGen[e.peer]++
		gen := s.bfdGen[e.peer]
		s.bfd.log.Warn("bfd session down: bgp session torn down", "peer", e.peer, "diag", c.Diag.String(), "remoteDiag", c.RemoteDiag.String())
		if s.added[e.peer] { // else added disabled
			err := s.srv.DisablePeer(ctx, &api.DisablePeerRequest{Address: e.peer.String(), Communication: "BFD session down: " + e.change.Diag.String()})
			if err != nil {
				s.bfd.log.Error("disabling bgp peer after bfd down", "peer", e.peer, "err", err)
			}
		}
		time.AfterFunc(p.HoldTime, func() { s.bfd.push(bfdEvent{peer: e.peer, release: true, gen: gen}) })
	case s.bfdHeld[e.peer] && (e.change.To == bfd.Up || e.release && e.gen == s.bfdGen[e.peer]):
		delete(s.bfdHeld, e.peer)
		if p.AdminDown || !s.added[e.peer] {
			return // waiting for its password, or added enabled
		}
		why := "bfd session up again"
		if e.release {
			why = "bfd still down after the hold time; the hold timer guards the session"
		}
		s.bfd.log.Info("bgp peer enabled: "+why, "peer", e.peer)
		if err := s.srv.EnablePeer(ctx, &api.EnablePeerRequest{Address: e.peer.String()}); err != nil {
			s.bfd.log.Error("enabling bgp peer", "peer", e.peer, "err", err)
		}
	}
}

// BFDSession is the BFD session with one peer.
type BFDSession = bfd.SessionStatus

// BFDSessions reports the BFD session of every peer that has one, sorted
// by peer, and whether each BGP peer is held down by its BFD session.
func (s *Speaker) BFDSessions() []BFDSession {
	if s.bfd == nil {
		return nil
	}
	return s.bfd.srv.Sessions()
}

// BFDHeld reports whether peer's BGP session is held down by a BFD failure.
func (s *Speaker) BFDHeld(peer netip.Addr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bfdHeld[peer]
}
