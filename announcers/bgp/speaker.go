package bgp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/server"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
)

// ErrClosed is returned by Announce after Close.
var ErrClosed = errors.New("bgp announcer is closed")

const exportPolicy = "switchyard-export"

// startMu serialises StartBgp: GoBGP v3 writes package-level route
// selection settings there. Other BgpServers in the same process still read
// them unsynchronised, so run one Speaker per process.
var startMu sync.Mutex

// Speaker is an embedded BGP speaker that announces host routes. All BGP
// state changes go through GoBGP's single management goroutine; Speaker
// only adds the bookkeeping of what it last sent.
type Speaker struct {
	cfg Config
	srv *server.BgpServer
	// peers are the configured peers' addresses, sorted.
	peers []netip.Addr

	bfd *bfdLink // nil without BFD peers

	mu     sync.Mutex
	sent   map[netip.Addr]struct{} // routes GoBGP currently advertises for us
	closed bool
	// added are the peers in GoBGP: all from New, or with graceful
	// restart from the first Announce.
	added   map[netip.Addr]bool
	bfdHeld map[netip.Addr]bool   // peers disabled by a BFD failure
	bfdGen  map[netip.Addr]uint64 // counts the failures, to match hold-time fallbacks
}

var (
	_ plugin.Announcer      = (*Speaker)(nil)
	_ plugin.HealthReporter = (*Speaker)(nil)
)

// New validates cfg, starts the speaker and adds its peers; with
// graceful restart enabled, it adds them at the first Announce (see
// Config.GracefulRestart). Sessions come up in the background (GoBGP
// waits a random 1-2 s before its first connection attempt). log
// receives GoBGP's own logging and the BFD sessions' effects on peers;
// nil discards it. Peers with BFD get their sessions over the host's UDP
// sockets unless an Option says otherwise.
func New(ctx context.Context, cfg Config, log *slog.Logger, opts ...Option) (*Speaker, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("invalid bgp announcer config: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	srv := server.NewBgpServer(server.LoggerOption(slogAdapter{log.With("announcer", cfg.Name)}))
	// Serve runs GoBGP's management loop; GoBGP v3 has no way to end it,
	// so after Close it idles with no peers and no listeners.
	go srv.Serve()
	var peers []netip.Addr
	for _, p := range cfg.Peers {
		peers = append(peers, p.Address)
	}
	slices.SortFunc(peers, netip.Addr.Compare)
	s := &Speaker{peers: peers, cfg: cfg, srv: srv, sent: map[netip.Addr]struct{}{}, added: map[netip.Addr]bool{}, bfdHeld: map[netip.Addr]bool{}, bfdGen: map[netip.Addr]uint64{}}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	err := s.start(ctx)
	if err == nil {
		err = s.startBFD(log.With("announcer", cfg.Name), o)
	}
	if err != nil {
		stopCtx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		_ = shutdown(stopCtx, srv, nil)
		return nil, err
	}
	return s, nil
}

func (s *Speaker) start(ctx context.Context) error {
	c := s.cfg
	listen := int32(-1)
	if c.ListenPort > 0 {
		listen = int32(c.ListenPort)
	}
	global := &api.Global{Asn: c.LocalASN, RouterId: c.RouterID.String(), ListenPort: listen}
	if c.GracefulRestart.Enabled {
		global.GracefulRestart = &api.GracefulRestart{Enabled: true, RestartTime: uint32(c.GracefulRestart.RestartTime / time.Second)}
	}
	startMu.Lock()
	err := s.srv.StartBgp(ctx, &api.StartBgpRequest{Global: global})
	startMu.Unlock()
	if err != nil {
		return fmt.Errorf("starting bgp speaker AS %d: %w", c.LocalASN, err)
	}
	if err := s.installExportPolicy(ctx); err != nil {
		return err
	}
	if c.GracefulRestart.Enabled {
		return nil // added by the first Announce
	}
	return s.addPeers(ctx)
}

// addPeers adds the configured peers to GoBGP, each once. With graceful
// restart they say they restart with their forwarding state kept (the
// dataplane is left in place across a restart; RFC 4724 R and F bits):
// peers then keep this node's stale routes until its End-of-RIB, instead
// of flushing them when the new session opens, and GoBGP sends its
// routes once the peers have sent theirs. A peer held down by BFD is
// added disabled. Callers hold s.mu, or own s alone (New).
func (s *Speaker) addPeers(ctx context.Context) error {
	var errs []error
	for _, p := range s.cfg.Peers {
		if s.added[p.Address] {
			continue
		}
		ap := s.cfg.apiPeer(p)
		ap.Conf.AdminDown = ap.Conf.AdminDown || s.bfdHeld[p.Address]
		if ap.GracefulRestart != nil {
			ap.GracefulRestart.LocalRestarting = true
		}
		if err := s.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: ap}); err != nil {
			errs = append(errs, fmt.Errorf("adding bgp peer %s AS %d: %w", p.Address, p.ASN, err))
			continue
		}
		s.added[p.Address] = true
	}
	return errors.Join(errs...)
}

// apiPeer translates a defaulted Peer into GoBGP's form.
func (c Config) apiPeer(p Peer) *api.Peer {
	sec := func(d time.Duration) uint64 { return uint64(d / time.Second) }
	out := &api.Peer{
		Conf: &api.PeerConf{NeighborAddress: p.Address.String(), PeerAsn: p.ASN, AuthPassword: p.Password, AdminDown: p.AdminDown},
		Timers: &api.Timers{Config: &api.TimersConfig{
			ConnectRetry: sec(p.ConnectRetry), HoldTime: sec(p.HoldTime), KeepaliveInterval: sec(p.KeepaliveTime),
		}},
		Transport: &api.Transport{RemotePort: uint32(p.Port)},
	}
	if p.SourceAddress.IsValid() {
		out.Transport.LocalAddress = p.SourceAddress.String()
	}
	if p.EBGPMultihopTTL > 0 && !c.ibgp(p) {
		out.EbgpMultihop = &api.EbgpMultihop{Enabled: true, MultihopTtl: uint32(p.EBGPMultihopTTL)}
	}
	gr := c.GracefulRestart.Enabled
	if gr {
		out.GracefulRestart = &api.GracefulRestart{Enabled: true, RestartTime: uint32(c.GracefulRestart.RestartTime / time.Second)}
	}
	for _, f := range c.families(p) {
		as := &api.AfiSafi{Config: &api.AfiSafiConfig{Family: f, Enabled: true}}
		if gr {
			as.MpGracefulRestart = &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: true}}
		}
		out.AfiSafis = append(out.AfiSafis, as)
	}
	return out
}

// families lists what a peer's session carries: the session's own family,
// and the other one when a next hop of that family is configured.
func (c Config) families(p Peer) []*api.Family {
	var out []*api.Family
	if p.Address.Is4() || c.NextHop4.IsValid() {
		out = append(out, familyIPv4)
	}
	if p.Address.Is6() && !p.Address.Is4In6() || c.NextHop6.IsValid() {
		out = append(out, familyIPv6)
	}
	return out
}

// installExportPolicy adds one statement per peer with communities or a
// local preference, matched on the peer's address, to the global export
// policy. Peers without either get routes unchanged.
func (s *Speaker) installExportPolicy(ctx context.Context) error {
	var stmts []*api.Statement
	for i, p := range s.cfg.Peers {
		if len(p.Communities) == 0 && p.LocalPref == 0 {
			continue
		}
		set := "switchyard-peer-" + strconv.Itoa(i)
		err := s.srv.AddDefinedSet(ctx, &api.AddDefinedSetRequest{DefinedSet: &api.DefinedSet{
			DefinedType: api.DefinedType_NEIGHBOR, Name: set,
			List: []string{netip.PrefixFrom(p.Address, p.Address.BitLen()).String()},
		}})
		if err != nil {
			return fmt.Errorf("adding neighbor set for bgp peer %s: %w", p.Address, err)
		}
		act := &api.Actions{RouteAction: api.RouteAction_NONE}
		if len(p.Communities) > 0 {
			act.Community = &api.CommunityAction{Type: api.CommunityAction_ADD, Communities: p.Communities}
		}
		if p.LocalPref > 0 {
			act.LocalPref = &api.LocalPrefAction{Value: p.LocalPref}
		}
		stmts = append(stmts, &api.Statement{
			Name:       set,
			Conditions: &api.Conditions{NeighborSet: &api.MatchSet{Type: api.MatchSet_ANY, Name: set}},
			Actions:    act,
		})
	}
	if len(stmts) == 0 {
		return nil
	}
	if err := s.srv.AddPolicy(ctx, &api.AddPolicyRequest{Policy: &api.Policy{Name: exportPolicy, Statements: stmts}}); err != nil {
		return fmt.Errorf("adding bgp export policy: %w", err)
	}
	err := s.srv.AddPolicyAssignment(ctx, &api.AddPolicyAssignmentRequest{Assignment: &api.PolicyAssignment{
		Name: "global", Direction: api.PolicyDirection_EXPORT,
		Policies: []*api.Policy{{Name: exportPolicy}}, DefaultAction: api.RouteAction_ACCEPT,
	}})
	if err != nil {
		return fmt.Errorf("assigning bgp export policy: %w", err)
	}
	return nil
}

// SetPassword sets the TCP MD5 password of the configured peer at addr,
// and brings the peer up if it was AdminDown. GoBGP re-creates a peer
// whose configuration changes (the password included): its session, if
// any, ends with a Cease and a new one is dialled with the new key, and
// GoBGP sends it the routes once it is established. The same password on
// a peer that is up changes nothing.
func (s *Speaker) SetPassword(ctx context.Context, addr netip.Addr, password string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	i := slices.IndexFunc(s.cfg.Peers, func(p Peer) bool { return p.Address == addr })
	if i < 0 {
		return fmt.Errorf("bgp peer %s is not configured", addr)
	}
	p := s.cfg.Peers[i]
	if p.Password == password && !p.AdminDown {
		return nil
	}
	p.Password, p.AdminDown = password, false
	if !s.added[addr] {
		s.cfg.Peers[i] = p // added with it
		return nil
	}
	ap := s.cfg.apiPeer(p)
	ap.Conf.AdminDown = s.bfdHeld[addr] // a BFD failure still holds it down
	if _, err := s.srv.UpdatePeer(ctx, &api.UpdatePeerRequest{Peer: ap}); err != nil {
		return fmt.Errorf("updating the password of bgp peer %s: %w", addr, err)
	}
	s.cfg.Peers[i] = p
	return nil
}

// Name returns the configured announcer name.
func (s *Speaker) Name() string { return s.cfg.Name }

// Announce makes set the complete set of host routes this node advertises:
// routes for addresses no longer in set are withdrawn first, then new ones
// added. An unchanged set costs a map comparison and sends nothing. Routes
// that failed are retried by the next call. It needs no established
// session: GoBGP sends the routes when a session comes up. With graceful
// restart the first call adds the peers, after the routes: a session's
// first End-of-RIB then follows the complete set, and peers keeping
// stale routes of this node from before a restart drop none that are
// still announced.
func (s *Speaker) Announce(ctx context.Context, set []model.Announcement) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	want, errSet := desired(set)
	add, del := diff(s.sent, want)
	errs := []error{errSet}
	for _, a := range del {
		if err := s.withdraw(ctx, a); err != nil {
			errs = append(errs, err)
		}
	}
	for _, a := range add {
		if err := ctx.Err(); err != nil {
			errs = append(errs, fmt.Errorf("announcing %s: %w", a, err))
			break
		}
		p, err := hostPath(a, s.nextHop(a))
		if err == nil {
			_, err = s.srv.AddPath(ctx, &api.AddPathRequest{TableType: api.TableType_GLOBAL, Path: p})
		}
		if err != nil {
			errs = append(errs, &plugin.AddrError{Addr: a, Err: fmt.Errorf("bgp route: %w", err)})
			continue
		}
		s.sent[a] = struct{}{}
	}
	if len(s.added) < len(s.cfg.Peers) {
		errs = append(errs, s.addPeers(ctx))
	}
	return errors.Join(errs...)
}

func (s *Speaker) withdraw(ctx context.Context, a netip.Addr) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("withdrawing %s: %w", a, err)
	}
	p, err := hostPath(a, s.nextHop(a))
	if err == nil {
		err = s.srv.DeletePath(ctx, &api.DeletePathRequest{TableType: api.TableType_GLOBAL, Family: p.Family, Path: p})
	}
	if err != nil {
		return &plugin.AddrError{Addr: a, Withdraw: true, Err: fmt.Errorf("bgp route: %w", err)}
	}
	delete(s.sent, a)
	return nil
}

func (s *Speaker) nextHop(a netip.Addr) netip.Addr {
	if a.Is4() {
		return s.cfg.NextHop4
	}
	return s.cfg.NextHop6
}

// Close withdraws every route and ends every session with a Cease
// NOTIFICATION (peers drop this node's routes at once; graceful restart
// does not apply), then ends the BFD sessions with AdminDown. Later
// calls do nothing.
func (s *Speaker) Close() error { return s.end(s.close) }

// end runs stop, the first time, then ends the BFD sessions.
func (s *Speaker) end(stop func() error) error {
	err := stop()
	if err == errAlreadyClosed {
		return nil
	}
	if s.bfd != nil {
		s.bfd.stop()
	}
	return err
}

var errAlreadyClosed = errors.New("already closed")

// CloseForRestart ends the speaker for a restart of the daemon. With
// graceful restart it withdraws nothing and ends every session without a
// NOTIFICATION: the TCP connection is shut down, as when the process
// dies, so peers that negotiated graceful restart keep this node's
// routes, marked stale, for RestartTime, until the restarted speaker
// has sent them again and its End-of-RIB. A session it could not end
// that way ends with a Cease, as Close does, and is reported. Without
// graceful restart the peers would drop the routes when the sessions
// end anyway, so it is Close: they are withdrawn first. BFD sessions
// end with AdminDown either way. Later calls, and Close after it, do
// nothing.
func (s *Speaker) CloseForRestart() error {
	if !s.cfg.GracefulRestart.Enabled {
		return s.Close()
	}
	return s.end(s.drop)
}

func (s *Speaker) drop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errAlreadyClosed
	}
	s.closed = true
	remote := map[netip.AddrPort]bool{}
	addrs := map[netip.Addr]bool{}
	for _, p := range s.cfg.Peers {
		remote[netip.AddrPortFrom(p.Address, p.Port)] = true
		addrs[p.Address] = true
	}
	var dropErr error
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	// The connections are shut down once shutdown watches the sessions
	// and before it deletes the peers: the Cease GoBGP then writes to a
	// session it still holds fails (EPIPE), and its end is seen.
	err := shutdown(ctx, s.srv, func(established int) {
		n, err := dropConnections(remote, addrs, uint16(s.cfg.ListenPort))
		if err == nil && n < established {
			err = fmt.Errorf("%d of %d established sessions not found among the process's connections: they end with a Cease", established-n, established)
		}
		dropErr = err
	})
	if err != nil {
		err = fmt.Errorf("stopping bgp speaker: %w", err)
	}
	return errors.Join(dropErr, err)
}

func (s *Speaker) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errAlreadyClosed
	}
	s.closed = true
	var errs []error
	ctx := context.Background()
	for _, a := range slices.SortedFunc(maps.Keys(s.sent), netip.Addr.Compare) {
		if err := s.withdraw(ctx, a); err != nil {
			errs = append(errs, err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, closeTimeout)
	defer cancel()
	if err := shutdown(ctx, s.srv, nil); err != nil {
		errs = append(errs, fmt.Errorf("stopping bgp speaker: %w", err))
	}
	return errors.Join(errs...)
}

// closeTimeout bounds how long Close waits for sessions to wind down.
const closeTimeout = 10 * time.Second

// shutdown ends every session with a Cease and stops srv; beforeDelete,
// when set, runs once the sessions are watched, before the peers are
// deleted, with the number of established sessions. GoBGP v3.37's StopBgp clears the global config while the
// goroutines of sessions it has just cancelled may still read it (a data
// race inside GoBGP), so the peers are deleted first, and StopBgp runs
// once every established session has reported its goroutines gone
// (GoBGP emits a final idle event then), or has gone idle by itself.
func shutdown(ctx context.Context, srv *server.BgpServer, beforeDelete func(established int)) error {
	idle := make(chan string, 64)
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	err := srv.WatchEvent(watchCtx, &api.WatchEventRequest{Peer: &api.WatchEventRequest_Peer{}}, func(r *api.WatchEventResponse) {
		st := r.GetPeer().GetPeer().GetState()
		if st.GetSessionState() == api.PeerState_IDLE {
			select {
			case idle <- st.GetNeighborAddress():
			default:
			}
		}
	})
	if err != nil {
		return fmt.Errorf("watching peers: %w", err)
	}
	established := map[string]bool{}
	var addrs []string
	err = srv.ListPeer(ctx, &api.ListPeerRequest{}, func(p *api.Peer) {
		a := p.GetConf().GetNeighborAddress()
		addrs = append(addrs, a)
		if p.GetState().GetSessionState() == api.PeerState_ESTABLISHED {
			established[a] = true
		}
	})
	if err != nil {
		return fmt.Errorf("listing peers: %w", err)
	}
	if beforeDelete != nil {
		beforeDelete(len(established))
	}
	var errs []error
	for _, a := range addrs {
		if err := srv.DeletePeer(ctx, &api.DeletePeerRequest{Address: a}); err != nil {
			errs = append(errs, fmt.Errorf("deleting peer %s: %w", a, err))
			delete(established, a)
		}
	}
	for len(established) > 0 {
		select {
		case a := <-idle:
			delete(established, a)
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("waiting for %d sessions to close: %w", len(established), ctx.Err()))
			established = nil
		}
	}
	if err := srv.StopBgp(ctx, &api.StopBgpRequest{}); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Session is the state of the session with one configured peer.
type Session struct {
	Peer netip.Addr
	// State is the BGP FSM state in lower case: idle, connect, active,
	// opensent, openconfirm or established.
	State string
	Up    bool // State is established
}

// Sessions reports the session state of every configured peer, sorted by
// address, e.g. for switchyard_bgp_session_up{peer}. A peer not added
// yet (graceful restart, before the first Announce) is idle.
func (s *Speaker) Sessions(ctx context.Context) ([]Session, error) {
	got := map[netip.Addr]api.PeerState_SessionState{}
	err := s.srv.ListPeer(ctx, &api.ListPeerRequest{}, func(p *api.Peer) {
		if addr, err := netip.ParseAddr(p.GetConf().GetNeighborAddress()); err == nil {
			got[addr] = p.GetState().GetSessionState()
		}
	})
	if err != nil {
		return nil, fmt.Errorf("listing bgp peers: %w", err)
	}
	out := make([]Session, 0, len(s.peers))
	for _, addr := range s.peers {
		st, ok := got[addr]
		if !ok {
			st = api.PeerState_IDLE
		}
		out = append(out, Session{Peer: addr, State: strings.ToLower(st.String()), Up: st == api.PeerState_ESTABLISHED})
	}
	return out, nil
}

// Healthy reports an error when peers are configured and none is
// established.
func (s *Speaker) Healthy() error {
	if len(s.cfg.Peers) == 0 {
		return nil
	}
	sess, err := s.Sessions(context.Background())
	if err != nil {
		return err
	}
	for _, x := range sess {
		if x.Up {
			return nil
		}
	}
	return fmt.Errorf("no bgp session established (%d peers configured)", len(s.cfg.Peers))
}
