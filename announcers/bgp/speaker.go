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

	bfd *bfdLink // nil without BFD peers

	mu      sync.Mutex
	sent    map[netip.Addr]struct{} // routes GoBGP currently advertises for us
	closed  bool
	bfdHeld map[netip.Addr]bool   // peers disabled by a BFD failure
	bfdGen  map[netip.Addr]uint64 // counts the failures, to match hold-time fallbacks
}

var (
	_ plugin.Announcer      = (*Speaker)(nil)
	_ plugin.HealthReporter = (*Speaker)(nil)
)

// New validates cfg, starts the speaker and adds its peers. Sessions come
// up in the background (GoBGP waits a random 1-2 s before its first
// connection attempt). log receives GoBGP's own logging and the BFD
// sessions' effects on peers; nil discards it. Peers with BFD get their
// sessions over the host's UDP sockets unless an Option says otherwise.
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
	s := &Speaker{cfg: cfg, srv: srv, sent: map[netip.Addr]struct{}{}, bfdHeld: map[netip.Addr]bool{}, bfdGen: map[netip.Addr]uint64{}}
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
		_ = shutdown(stopCtx, srv)
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
	for _, p := range c.Peers {
		if err := s.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: c.apiPeer(p)}); err != nil {
			return fmt.Errorf("adding bgp peer %s AS %d: %w", p.Address, p.ASN, err)
		}
	}
	return nil
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
// session: GoBGP sends the routes when a session comes up.
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
func (s *Speaker) Close() error {
	err := s.close()
	if s.bfd != nil && err != errAlreadyClosed {
		s.bfd.stop()
	}
	if err == errAlreadyClosed {
		return nil
	}
	return err
}

var errAlreadyClosed = errors.New("already closed")

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
	if err := shutdown(ctx, s.srv); err != nil {
		errs = append(errs, fmt.Errorf("stopping bgp speaker: %w", err))
	}
	return errors.Join(errs...)
}

// closeTimeout bounds how long Close waits for sessions to wind down.
const closeTimeout = 10 * time.Second

// shutdown ends every session with a Cease and stops srv. GoBGP v3.37's
// StopBgp clears the global config while the goroutines of sessions it has
// just cancelled may still read it (a data race inside GoBGP), so the peers
// are deleted first, and StopBgp runs once every established session has
// reported its goroutines gone (GoBGP emits a final idle event then).
func shutdown(ctx context.Context, srv *server.BgpServer) error {
	established := map[string]bool{}
	var addrs []string
	err := srv.ListPeer(ctx, &api.ListPeerRequest{}, func(p *api.Peer) {
		a := p.GetConf().GetNeighborAddress()
		addrs = append(addrs, a)
		if p.GetState().GetSessionState() == api.PeerState_ESTABLISHED {
			established[a] = true
		}
	})
	if err != nil {
		return fmt.Errorf("listing peers: %w", err)
	}
	idle := make(chan string, 64)
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	err = srv.WatchEvent(watchCtx, &api.WatchEventRequest{Peer: &api.WatchEventRequest_Peer{}}, func(r *api.WatchEventResponse) {
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
// address, e.g. for switchyard_bgp_session_up{peer}.
func (s *Speaker) Sessions(ctx context.Context) ([]Session, error) {
	var out []Session
	err := s.srv.ListPeer(ctx, &api.ListPeerRequest{}, func(p *api.Peer) {
		addr, err := netip.ParseAddr(p.GetConf().GetNeighborAddress())
		if err != nil {
			return
		}
		st := p.GetState().GetSessionState()
		out = append(out, Session{
			Peer:  addr,
			State: strings.ToLower(st.String()),
			Up:    st == api.PeerState_ESTABLISHED,
		})
	})
	if err != nil {
		return nil, fmt.Errorf("listing bgp peers: %w", err)
	}
	slices.SortFunc(out, func(a, b Session) int { return a.Peer.Compare(b.Peer) })
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
