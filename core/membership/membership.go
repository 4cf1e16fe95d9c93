package membership

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// State is what membership believes of a member.
type State uint8

const (
	// StateAlive: the member answers probes (or is suspected but not yet
	// declared dead).
	StateAlive State = iota + 1
	// StateDead: the member stopped answering without leaving.
	StateDead
	// StateLeft: the member left gracefully (daemon shut down).
	StateLeft
	// StateRestarting: the member left saying it restarts
	// (CloseForRestart): it counts as alive for Config.RestartGrace
	// from when it left, then as dead.
	StateRestarting
)

func (s State) String() string {
	switch s {
	case StateAlive:
		return "alive"
	case StateDead:
		return "dead"
	case StateLeft:
		return "left"
	case StateRestarting:
		return "restarting"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Member is one daemon membership knows of.
type Member struct {
	Name  string
	Addr  netip.AddrPort
	State State
	// Since is when this daemon learnt the state.
	Since time.Time
}

// Peer is another node's daemon to join: its Kubernetes node name and
// gossip address ("host" or "host:port"; the port defaults to the local
// one, since a DaemonSet gossips on the same port everywhere).
type Peer struct {
	Name string
	Addr string
	// NotReady is set when Kubernetes says the node is not Ready: once
	// gossip finds it dead too, the quorum guard stops counting it (it
	// is gone, not on the other side of a partition).
	NotReady bool
}

// leaveTimeout bounds Close's graceful leave when ctx has no deadline.
// The two broadcasts take a few gossip rounds (about 200 ms with
// LANTiming); the bound is for a loaded node, whose gossip may stall for
// a second or more, and is well inside a pod's termination grace. It is
// only waited for while another member is alive and the broadcast has
// not gone out yet.
const leaveTimeout = 5 * time.Second

// Membership is this daemon's view of the gossip cluster. Its methods are
// safe for concurrent use.
type Membership struct {
	ml        *memberlist.Memberlist
	keyring   *memberlist.Keyring // nil: gossip in clear
	self      string
	port      int
	guard     bool
	rejoin    time.Duration
	timing    Timing
	grace     time.Duration
	transport *hearing
	changes   chan struct{}
	poke      chan struct{}
	done      chan struct{}

	mu      sync.Mutex
	members map[string]Member
	// heard is when each member last sent this daemon a packet, or
	// became alive; byAddr names the senders (members' gossip addresses
	// and peers' addresses); notReady the peers Kubernetes says are not
	// Ready.
	heard    map[string]time.Time
	byAddr   map[netip.Addr]string
	notReady map[string]bool
	// view caches judge, recomputed whenever members or heard change
	// and on Run's tick: Alive runs for every node and address in each
	// election.
	view     guardView
	cutOffAt time.Time
	peers    []Peer
	joinErr  error
	closed   bool
	// leaving is the metadata Close or CloseForRestart gossips before
	// leaving: metaLeaving or metaRestarting; empty until then.
	leaving string
}

// New starts gossiping on cfg's address; it joins nobody until SetPeers
// and Run.
func New(cfg Config) (*Membership, error) {
	if cfg.NodeName == "" {
		return nil, errors.New("membership: node name is required")
	}
	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.NodeName
	mc.Label = "switchyard"
	mc.BindAddr = orDefault(cfg.BindAddr, "0.0.0.0")
	switch {
	case cfg.BindPort == 0:
		mc.BindPort = DefaultPort
	case cfg.BindPort < 0:
		mc.BindPort = 0 // memberlist picks a free port
	default:
		mc.BindPort = cfg.BindPort
	}
	mc.AdvertiseAddr = cfg.AdvertiseAddr
	mc.AdvertisePort = cfg.AdvertisePort
	if mc.AdvertisePort == 0 {
		mc.AdvertisePort = mc.BindPort // memberlist fills in a free port it picked
	}
	t := cfg.Timing
	if t == (Timing{}) {
		t = LANTiming()
	}
	mc.ProbeInterval, mc.ProbeTimeout = t.ProbeInterval, t.ProbeTimeout
	mc.SuspicionMult, mc.SuspicionMaxTimeoutMult = t.SuspicionMult, t.SuspicionMaxTimeoutMult
	mc.IndirectChecks = t.IndirectChecks
	mc.GossipInterval, mc.GossipNodes = t.GossipInterval, t.GossipNodes
	mc.RetransmitMult = t.RetransmitMult
	mc.PushPullInterval = t.PushPullInterval
	mc.GossipToTheDeadTime = t.GossipToTheDeadTime
	mc.DeadNodeReclaimTime = t.DeadNodeReclaimTime
	mc.TCPTimeout = t.TCPTimeout
	mc.AwarenessMaxMultiplier = t.AwarenessMaxMultiplier
	if len(cfg.Keys) > 0 {
		for i, k := range cfg.Keys {
			if err := checkKey(k); err != nil {
				return nil, fmt.Errorf("membership: gossip key %d: %w", i, err)
			}
		}
		kr, err := memberlist.NewKeyring(cfg.Keys, cfg.Keys[0])
		if err != nil {
			return nil, fmt.Errorf("membership: keyring: %w", err)
		}
		mc.Keyring = kr
	}
	keyring := mc.Keyring
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	mc.Logger = newStdLogger(logger.With("component", "memberlist"))
	mc.DNSConfigPath = "" // peers are IP addresses; never read resolv.conf

	m := &Membership{
		keyring: keyring,
		self:    cfg.NodeName,
		guard:   !cfg.DisableQuorumGuard,
		rejoin:  cfg.RejoinInterval,
		changes: make(chan struct{}, 1),
		poke:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		members: map[string]Member{},
	}
	if m.rejoin <= 0 {
		m.rejoin = 10 * time.Second
	}
	m.timing = t
	m.grace = max(cfg.RestartGrace, 0)
	// A daemon that just started may have been dead a moment ago, its
	// addresses taken by others that have not yet seen it back: it waits
	// a window, as one back from a cut does.
	m.cutOffAt = time.Now()
	m.heard = map[string]time.Time{}
	m.byAddr = map[netip.Addr]string{}
	m.notReady = map[string]bool{}
	mc.Events = events{m}
	mc.Delegate = meta{m}
	where := net.JoinHostPort(mc.BindAddr, strconv.Itoa(mc.BindPort))
	tr, err := newHearing(mc, m.heardFrom)
	if err != nil {
		return nil, fmt.Errorf("membership: start gossip on %s: %w", where, err)
	}
	m.transport = tr
	mc.Transport = tr
	ml, err := memberlist.Create(mc)
	if err != nil {
		_ = tr.Shutdown()
		tr.close()
		return nil, fmt.Errorf("membership: start gossip on %s: %w", where, err)
	}
	m.ml = ml
	m.port = int(ml.LocalNode().Port)
	return m, nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// events records memberlist's notifications; it never blocks.
//
// memberlist's NotifyLeave does not say whether a node left or died (the
// state it passes is not updated), so a daemon about to leave first
// gossips node metadata "leaving", or "restarting" (see Close and
// CloseForRestart): a node whose last metadata says so and then
// disappears left, or is restarting. Should the leave overtake the
// metadata on its way to some member, that member records a death,
// which is the safe mistake: the dead member's addresses move after the
// fence, as they would without a grace.
type events struct{ m *Membership }

func (e events) NotifyJoin(n *memberlist.Node)   { e.m.record(n, StateAlive) }
func (e events) NotifyUpdate(n *memberlist.Node) { e.m.record(n, StateAlive) }
func (e events) NotifyLeave(n *memberlist.Node)  { e.m.record(n, e.m.leftState(string(n.Meta))) }

// leftState is the state of a member that disappeared with metadata
// meta: left, restarting (left, when this daemon holds no grace), or
// dead.
func (m *Membership) leftState(meta string) State {
	switch {
	case meta == metaLeaving, meta == metaRestarting && m.grace == 0:
		return StateLeft
	case meta == metaRestarting:
		return StateRestarting
	}
	return StateDead
}

// The node metadata of a daemon that is leaving, for good or to restart.
const (
	metaLeaving    = "leaving"
	metaRestarting = "restarting"
)

// meta is the memberlist.Delegate that publishes this daemon's metadata:
// empty, or metaLeaving or metaRestarting once Close or CloseForRestart
// began. It carries no other messages.
type meta struct{ m *Membership }

func (d meta) NodeMeta(limit int) []byte {
	d.m.mu.Lock()
	defer d.m.mu.Unlock()
	if d.m.leaving == "" {
		return nil
	}
	return []byte(d.m.leaving)
}
func (meta) NotifyMsg([]byte)                  {}
func (meta) GetBroadcasts(_, _ int) [][]byte   { return nil }
func (meta) LocalState(bool) []byte            { return nil }
func (meta) MergeRemoteState(_ []byte, _ bool) {}

func (m *Membership) record(n *memberlist.Node, s State) {
	ip, _ := netip.AddrFromSlice(n.Addr)
	now := time.Now()
	mem := Member{Name: n.Name, Addr: netip.AddrPortFrom(ip.Unmap(), n.Port), State: s, Since: now}
	m.mu.Lock()
	old, had := m.members[n.Name]
	moved := !had || old.State != s || old.Addr != mem.Addr
	if !moved {
		mem.Since = old.Since // a metadata update changes no state
	}
	m.members[n.Name] = mem
	m.byAddr[mem.Addr.Addr()] = n.Name
	if s == StateAlive && moved {
		m.heard[n.Name] = now
	}
	changed := m.refreshLocked(now)
	m.mu.Unlock()
	if moved || changed {
		m.notify()
	}
	if s == StateDead && moved {
		// Dial it at once: a member falsely declared dead (it answered
		// too late, on a starved machine) learns it from our state and
		// refutes within a gossip round, instead of staying dead to us
		// until the next rejoin or push-pull, 10 to 15 s later.
		m.pokeRun()
	}
}

// refreshLocked recomputes the guard's view at now and reports whether
// Alive's answers changed. m.mu must be held.
func (m *Membership) refreshLocked(now time.Time) bool {
	v := judge(m.members, guardInput{
		self: m.self, heard: m.heard, notReady: m.notReady, cutOffAt: m.cutOffAt,
		probeInterval: m.timing.ProbeInterval, suspicionMult: m.timing.SuspicionMult,
		restartGrace: m.grace,
	}, now)
	if v.cutOff {
		m.cutOffAt = now
	}
	changed := !v.equal(m.view)
	m.view = v
	return changed
}

// refresh is refreshLocked on Run's tick: a member's silence or a fence's
// end changes the view with no event.
func (m *Membership) refresh() {
	m.mu.Lock()
	changed := m.refreshLocked(time.Now())
	m.mu.Unlock()
	if changed {
		m.notify()
	}
}

func (m *Membership) pokeRun() {
	select {
	case m.poke <- struct{}{}:
	default:
	}
}

func (m *Membership) notify() {
	select {
	case m.changes <- struct{}{}:
	default: // a notification is already pending: coalesced
	}
}

// SetKeys replaces the gossip keys of a Membership started with
// Config.Keys, at once: the first encrypts from now on, and only the
// keys given decrypt (see Config.Keys for rotating without a partition).
// A Membership started without keys gossips in clear until a restart.
func (m *Membership) SetKeys(keys [][]byte) error {
	if m.keyring == nil {
		return errors.New("membership: gossip was started in clear; restart to encrypt it")
	}
	if len(keys) == 0 {
		return errors.New("membership: no gossip key; restart to gossip in clear")
	}
	for i, k := range keys {
		if err := checkKey(k); err != nil {
			return fmt.Errorf("membership: gossip key %d: %w", i, err)
		}
	}
	for _, k := range keys {
		if err := m.keyring.AddKey(k); err != nil {
			return fmt.Errorf("membership: add gossip key: %w", err)
		}
	}
	if err := m.keyring.UseKey(keys[0]); err != nil {
		return fmt.Errorf("membership: use gossip key: %w", err)
	}
	for _, k := range m.keyring.GetKeys() {
		if !slices.ContainsFunc(keys, func(x []byte) bool { return bytes.Equal(x, k) }) {
			if err := m.keyring.RemoveKey(k); err != nil {
				return fmt.Errorf("membership: remove gossip key: %w", err)
			}
		}
	}
	return nil
}

// Changes returns a channel that receives a value, coalesced, after
// membership changes: a member joined, died, left or moved. One consumer
// should read it and re-run what depends on Alive.
func (m *Membership) Changes() <-chan struct{} { return m.changes }

// Alive reports what gossip knows of node, with the signature
// election.AliveFunc wants: known is false for a node that never
// gossiped. With the quorum guard (see the package documentation): a
// daemon cut off from a possible majority reports itself not alive and
// has no opinion of the others; with exactly half alive it has no
// opinion at all; a member declared dead is still reported alive for a
// short fence.
func (m *Membership) Alive(node string) (alive, known bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mem, ok := m.members[node]
	return m.view.alive(m.guard, m.self, node, mem, ok)
}

// HasQuorum reports whether this daemon sees a strict majority of its
// members alive (members dead and NotReady in Kubernetes, or departed,
// do not count).
func (m *Membership) HasQuorum() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.view.quorum
}

// CutOff reports whether the members this daemon has not heard from
// recently could form a strict majority without it: with the guard, it
// then announces no layer-2 address.
func (m *Membership) CutOff() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.view.cutOff
}

// Members returns every member known, this daemon included, sorted by
// name: alive, dead and left ones.
func (m *Membership) Members() []Member {
	m.mu.Lock()
	out := make([]Member, 0, len(m.members))
	for _, mem := range m.members {
		out = append(out, mem)
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Size returns the number of alive members, this daemon included (the
// membership size metric).
func (m *Membership) Size() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, mem := range m.members {
		if mem.State == StateAlive {
			n++
		}
	}
	return n
}

// LocalAddr returns the address other members reach this daemon at.
func (m *Membership) LocalAddr() netip.AddrPort {
	n := m.ml.LocalNode()
	ip, _ := netip.AddrFromSlice(n.Addr)
	return netip.AddrPortFrom(ip.Unmap(), n.Port)
}

// SetPeers sets the other nodes' daemons to join, typically every node
// of the Node informer: Run joins those that are not alive members, now
// and every RejoinInterval. Dead or departed members whose names are not
// in peers (deleted nodes) are forgotten. It never blocks on the network.
func (m *Membership) SetPeers(peers []Peer) {
	names := map[string]bool{}
	notReady := map[string]bool{}
	for _, p := range peers {
		names[p.Name] = true
		if p.NotReady {
			notReady[p.Name] = true
		}
	}
	m.mu.Lock()
	m.peers = slices.Clone(peers)
	m.notReady = notReady
	forgot := false
	for name, mem := range m.members {
		if name != m.self && mem.State != StateAlive && !names[name] {
			delete(m.members, name)
			delete(m.heard, name)
			forgot = true
		}
	}
	m.byAddr = map[netip.Addr]string{}
	for _, p := range peers {
		host := p.Addr
		if h, _, err := net.SplitHostPort(p.Addr); err == nil {
			host = h
		}
		if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
			m.byAddr[ip.Unmap()] = p.Name
		}
	}
	for name, mem := range m.members {
		m.byAddr[mem.Addr.Addr()] = name
	}
	changed := m.refreshLocked(time.Now())
	m.mu.Unlock()
	if forgot || changed {
		m.notify()
	}
	m.pokeRun()
}

// JoinErr returns the error of the last join attempt that reached no
// peer, or nil.
func (m *Membership) JoinErr() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.joinErr
}

// Run joins the peers given to SetPeers, at once when they change and
// every RejoinInterval, until ctx is done or Close is called. Joining is
// a TCP state exchange bounded by Timing.TCPTimeout per peer.
func (m *Membership) Run(ctx context.Context) error {
	// The guard's view ages without events (silent members, fences
	// ending): refresh it every half probe interval, apart from joins,
	// which may wait on TCP for seconds.
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Go(func() {
		tick := time.NewTicker(max(m.timing.ProbeInterval/2, time.Millisecond))
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-m.done:
				return
			case <-tick.C:
				m.refresh()
			}
		}
	})
	t := time.NewTicker(m.rejoin)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-m.done:
			return nil
		case <-m.poke:
		case <-t.C:
		}
		m.joinMissing()
	}
}

// joinMissing dials the peers that are not alive members.
func (m *Membership) joinMissing() {
	m.mu.Lock()
	var addrs []string
	for _, p := range m.peers {
		if p.Name == m.self {
			continue
		}
		if mem, ok := m.members[p.Name]; ok && mem.State == StateAlive {
			continue
		}
		addrs = append(addrs, m.withPort(p.Addr))
	}
	m.mu.Unlock()
	if len(addrs) == 0 {
		return
	}
	_, err := m.ml.Join(addrs)
	if err != nil {
		err = fmt.Errorf("membership: join %s: %w", strings.Join(addrs, ","), err)
	}
	m.mu.Lock()
	m.joinErr = err
	m.mu.Unlock()
}

// withPort adds the local gossip port to an address without one.
func (m *Membership) withPort(addr string) string {
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return addr
	}
	return net.JoinHostPort(strings.Trim(addr, "[]"), strconv.Itoa(m.port))
}

// Close leaves the cluster gracefully (so that the others see "left" at
// once instead of detecting a death, and move this node's addresses),
// waiting at most until ctx's deadline or five seconds, then stops
// gossiping and ends Run.
func (m *Membership) Close(ctx context.Context) error {
	return m.close(ctx, metaLeaving)
}

// CloseForRestart is Close for a daemon that will be back on this node
// soon: with a RestartGrace it leaves saying it restarts, so that the
// others hold it alive, and its addresses where they are, for their
// grace; without one it is Close.
func (m *Membership) CloseForRestart(ctx context.Context) error {
	if m.grace == 0 {
		return m.Close(ctx)
	}
	return m.close(ctx, metaRestarting)
}

// close gossips meta, then leaves.
func (m *Membership) close(ctx context.Context, meta string) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	m.leaving = meta
	m.mu.Unlock()
	close(m.done)
	end := time.Now().Add(leaveTimeout)
	if d, ok := ctx.Deadline(); ok {
		end = d
	}
	var errs []error
	// Announce the intent first, so that the others record "left" (or
	// "restarting"), not "dead"; then leave. Each waits until its message went out to a
	// member, bounded by what remains of the deadline.
	if timeout := time.Until(end) / 2; timeout > 0 {
		if err := m.ml.UpdateNode(timeout); err != nil {
			errs = append(errs, fmt.Errorf("membership: announce leaving: %w", err))
		}
	}
	if timeout := time.Until(end); timeout > 0 {
		if err := m.ml.Leave(timeout); err != nil {
			errs = append(errs, fmt.Errorf("membership: leave: %w", err))
		}
	}
	if err := m.ml.Shutdown(); err != nil {
		errs = append(errs, fmt.Errorf("membership: shut down gossip: %w", err))
	}
	m.transport.close()
	return errors.Join(errs...)
}
