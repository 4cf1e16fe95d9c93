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
)

func (s State) String() string {
	switch s {
	case StateAlive:
		return "alive"
	case StateDead:
		return "dead"
	case StateLeft:
		return "left"
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
}

// leaveTimeout bounds Close's graceful leave when ctx has no deadline.
const leaveTimeout = time.Second

// Membership is this daemon's view of the gossip cluster. Its methods are
// safe for concurrent use.
type Membership struct {
	ml      *memberlist.Memberlist
	keyring *memberlist.Keyring // nil: gossip in clear
	self    string
	port    int
	guard   bool
	rejoin  time.Duration
	changes chan struct{}
	poke    chan struct{}
	done    chan struct{}

	mu      sync.Mutex
	members map[string]Member
	// quorum caches quorumLocked, recomputed whenever members changes:
	// Alive runs for every node and address in each election, members
	// change only on gossip events.
	quorum  bool
	peers   []Peer
	joinErr error
	closed  bool
	leaving bool
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
	mc.Events = events{m}
	mc.Delegate = meta{m}
	ml, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("membership: start gossip on %s: %w",
			net.JoinHostPort(mc.BindAddr, strconv.Itoa(mc.BindPort)), err)
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
// gossips node metadata "leaving" (see Close): a node whose last
// metadata says so and then disappears left. Should the leave overtake
// the metadata on its way to some member, that member records a death,
// which is the safe mistake.
type events struct{ m *Membership }

func (e events) NotifyJoin(n *memberlist.Node)   { e.m.record(n, StateAlive) }
func (e events) NotifyUpdate(n *memberlist.Node) { e.m.record(n, StateAlive) }
func (e events) NotifyLeave(n *memberlist.Node) {
	if string(n.Meta) == metaLeaving {
		e.m.record(n, StateLeft)
		return
	}
	e.m.record(n, StateDead)
}

// metaLeaving is the node metadata of a daemon that is leaving.
const metaLeaving = "leaving"

// meta is the memberlist.Delegate that publishes this daemon's metadata:
// empty, or metaLeaving once Close began. It carries no other messages.
type meta struct{ m *Membership }

func (d meta) NodeMeta(limit int) []byte {
	d.m.mu.Lock()
	defer d.m.mu.Unlock()
	if d.m.leaving {
		return []byte(metaLeaving)
	}
	return nil
}
func (meta) NotifyMsg([]byte)                  {}
func (meta) GetBroadcasts(_, _ int) [][]byte   { return nil }
func (meta) LocalState(bool) []byte            { return nil }
func (meta) MergeRemoteState(_ []byte, _ bool) {}

func (m *Membership) record(n *memberlist.Node, s State) {
	ip, _ := netip.AddrFromSlice(n.Addr)
	mem := Member{Name: n.Name, Addr: netip.AddrPortFrom(ip.Unmap(), n.Port), State: s, Since: time.Now()}
	m.mu.Lock()
	old, had := m.members[n.Name]
	m.members[n.Name] = mem
	m.quorum = m.quorumLocked()
	m.mu.Unlock()
	if !had || old.State != s || old.Addr != mem.Addr {
		m.notify()
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
// gossiped, and for every node while this daemon sees no majority of its
// members alive (the quorum guard).
func (m *Membership) Alive(node string) (alive, known bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.guard && !m.quorum {
		return false, false
	}
	mem, ok := m.members[node]
	if !ok {
		return false, false
	}
	return mem.State == StateAlive, true
}

// quorumLocked reports whether a strict majority of the members that did
// not leave are alive. m.mu must be held; readers use m.quorum.
func (m *Membership) quorumLocked() bool {
	alive, total := 0, 0
	for _, mem := range m.members {
		switch mem.State {
		case StateAlive:
			alive++
			total++
		case StateDead:
			total++
		}
	}
	return 2*alive > total
}

// HasQuorum reports whether this daemon sees a strict majority of its
// members alive; without it Alive abstains (unless the guard is off).
func (m *Membership) HasQuorum() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.quorum
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
	for _, p := range peers {
		names[p.Name] = true
	}
	m.mu.Lock()
	m.peers = slices.Clone(peers)
	forgot := false
	for name, mem := range m.members {
		if name != m.self && mem.State != StateAlive && !names[name] {
			delete(m.members, name)
			forgot = true
		}
	}
	m.quorum = m.quorumLocked()
	m.mu.Unlock()
	if forgot {
		m.notify()
	}
	select {
	case m.poke <- struct{}{}:
	default:
	}
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
// once instead of detecting a death), waiting at most until ctx's
// deadline or one second, then stops gossiping and ends Run.
func (m *Membership) Close(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	m.leaving = true
	m.mu.Unlock()
	close(m.done)
	end := time.Now().Add(leaveTimeout)
	if d, ok := ctx.Deadline(); ok {
		end = d
	}
	var errs []error
	// Announce the intent first, so that the others record "left", not
	// "dead"; then leave. Each waits until its message went out to a
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
	return errors.Join(errs...)
}
