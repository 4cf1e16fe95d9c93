package lb

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/switchyard-lb/switchyard/announcers/report"
	"github.com/switchyard-lb/switchyard/core/config"
	"github.com/switchyard-lb/switchyard/core/election"
	"github.com/switchyard-lb/switchyard/core/ipam"
	"github.com/switchyard-lb/switchyard/core/lbipam"
	"github.com/switchyard-lb/switchyard/core/membership"
	"github.com/switchyard-lb/switchyard/core/metrics"
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
)

// Config is what a Manager needs besides the SwitchyardConfig.
type Config struct {
	// Client reaches the API server. Required.
	Client kubernetes.Interface
	// NodeName is this node's name. Required.
	NodeName string
	// Namespace is the daemon's namespace, where it reads Secrets (see
	// DaemonNamespace). Required when the config names Secrets.
	Namespace string
	// Types are the announcer types; nil: Builtin().
	Types Types
	// Registerer receives the metrics. Required.
	Registerer prometheus.Registerer
	// Trigger asks the loop for a sync: an address may have changed
	// owner (membership) or announcer (a reload). Required.
	Trigger func()
	// Log nil: discard.
	Log *slog.Logger
}

// Manager is the LoadBalancer control plane of one daemon: the address
// allocator with its pools, the announcers the config lists (each with
// its owner, the single goroutine that changes it), gossip membership,
// the announcers' readiness and their AnnounceFailed Events. Without
// pools and announcers it does nothing.
type Manager struct {
	cfg     Config
	log     *slog.Logger
	secrets *Secrets
	ipam    *lbipam.Controller
	members *membership.Membership
	// rotation applies changes of the gossip keys' Secret; nil without
	// membership.secretKeySecret.
	rotation *gossipRotation
	events   *announceEvents
	health   *announcerHealth
	// owners and slots are the announcers, in config order.
	owners  []*owner
	slots   []*announcerSlot
	elected []plugin.ElectedAnnouncer

	closeOnce sync.Once
	closeErr  error

	mu sync.Mutex
	// pools and nodes are the last pools and nodes, for reloads.
	pools []ipam.Pool
	nodes map[string]*model.Node
	// selfKnown is set once the watch has reported this node.
	selfKnown bool
}

// New builds what c configures: the allocator when it has pools, and
// membership and the announcers when it has announcers. Announcers of a
// type that NeedsNode start once SetNodes reports this node; the others
// start here. On error New releases what it built.
func New(ctx context.Context, cfg Config, c *config.Config) (_ *Manager, err error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Types == nil {
		cfg.Types = Builtin()
	}
	m := &Manager{
		cfg:     cfg,
		log:     cfg.Log.With("component", "loadbalancing"),
		secrets: newSecrets(cfg.Client, cfg.Namespace, cfg.Log.With("component", "secrets")),
	}
	defer func() {
		if err != nil {
			_ = m.Close()
		}
	}()
	m.pools = ipamPools(c.Pools)
	if len(m.pools) > 0 {
		ctrl, err := lbipam.New(lbipam.Config{
			Client:          cfg.Client,
			Identity:        cfg.NodeName,
			Pools:           m.pools,
			Class:           c.LoadBalancerClass,
			IgnoreUnclassed: c.IgnoreUnclassed,
			LeaseNamespace:  lbipam.DefaultLeaseNamespace,
			Log:             cfg.Log,
		})
		if err != nil {
			return nil, err
		}
		m.ipam = ctrl
		cfg.Registerer.MustRegister(&poolCollector{stats: ctrl.Stats})
	}
	if len(c.Announcers) == 0 {
		return m, nil
	}
	if err := m.startMembership(ctx, c.Membership); err != nil {
		return nil, err
	}
	m.health = newAnnouncerHealth(nil)
	m.events = newAnnounceEvents(cfg.Client, cfg.NodeName)
	for _, ac := range c.Announcers {
		if err := m.addAnnouncer(ctx, ac); err != nil {
			return nil, fmt.Errorf("announcer %s: %w", ac.Name, err)
		}
	}
	cfg.Registerer.MustRegister(announcerCollector{m})
	return m, nil
}

// startMembership starts gossip among the daemons, with the keys mc
// names.
func (m *Manager) startMembership(ctx context.Context, mc config.Membership) error {
	keys, err := gossipKeys(ctx, m.secrets, mc)
	if err != nil {
		return err
	}
	members, err := membership.New(membership.Config{
		NodeName:     m.cfg.NodeName,
		BindAddr:     mc.BindAddress,
		BindPort:     mc.Port,
		Keys:         keys,
		Timing:       GossipTiming(mc),
		RestartGrace: restartGrace(mc),
		Logger:       m.cfg.Log.With("component", "membership"),
		// core/config documents the trade; unset means on.
		DisableQuorumGuard: mc.QuorumGuard != nil && !*mc.QuorumGuard,
	})
	if err != nil {
		return err
	}
	m.members = members
	if ref := mc.SecretKeySecret; ref != nil {
		m.rotation = &gossipRotation{ns: m.secrets.Namespace(), ref: *ref, m: members, log: m.log}
		m.secrets.follow(ref.Name, func(s *corev1.Secret) { _ = m.rotation.apply(s) })
	}
	m.cfg.Registerer.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Name: "membership_members",
		Help: "Daemons gossip membership knows alive, this one included.",
	}, func() float64 { return float64(members.Size()) }))
	return nil
}

// addAnnouncer builds the announcer ac configures through its type, with
// its owner, its Events and its readiness check.
func (m *Manager) addAnnouncer(ctx context.Context, ac config.Announcer) error {
	typ, ok := m.cfg.Types[ac.Type]
	if !ok {
		return fmt.Errorf("unknown type %q", ac.Type)
	}
	if typ.Check != nil {
		if err := typ.Check(ac); err != nil {
			return err
		}
	}
	slot := newAnnouncerSlot(ac, m.pools)
	o := newOwner(ac.Name, typ, ac, Env{
		NodeName: m.cfg.NodeName,
		Log:      m.cfg.Log.With("component", ac.Type),
		Secrets:  m.secrets,
	})
	o.nodes = func() ([]*model.Node, *model.Node) { return m.selectedNodes(slot) }
	o.built = m.built
	r := report.New(proxy{o}, report.Options{Recorder: m.events, Async: typ.Async})
	o.env.Result = r.Result
	m.slots = append(m.slots, slot)
	m.owners = append(m.owners, o)
	o.start()
	m.health.add(announcerCheck{name: ac.Name, probe: o.probe, grace: o.grace})
	m.elected = append(m.elected, plugin.ElectedAnnouncer{
		Announcer: r,
		Mode:      typ.Mode,
		Serves:    slot.serves,
		Selector:  slot,
		WithNodes: typ.WithNodes,
		Version:   slot.version.Load,
	})
	if typ.NeedsNode {
		return nil
	}
	return o.build(ctx, nil)
}

// built starts following the Secrets a new announcer follows; each
// change reaches it on its owner's goroutine.
func (m *Manager) built(o *owner, inst *Instance) {
	for _, f := range inst.Follow {
		m.secrets.follow(f.Name, func(s *corev1.Secret) {
			o.post(func(ctx context.Context) { f.Apply(ctx, s) })
		})
	}
}

// selectedNodes returns the ready nodes slot's node selector picks, by
// name, and this node.
func (m *Manager) selectedNodes(slot *announcerSlot) ([]*model.Node, *model.Node) {
	m.mu.Lock()
	nodes := m.nodes
	m.mu.Unlock()
	var out []*model.Node
	for _, name := range slices.Sorted(maps.Keys(nodes)) {
		if n := nodes[name]; n.Ready && slot.Matches(n.Labels) {
			out = append(out, n)
		}
	}
	return out, nodes[m.cfg.NodeName]
}

// Elected are the announcers, for the loop's election
// (reconcile.Config.Elected). Each passes the loop's calls to its owner.
func (m *Manager) Elected() []plugin.ElectedAnnouncer { return m.elected }

// Alive is the election's view of gossip membership
// (reconcile.Config.Alive); nil without announcers.
func (m *Manager) Alive() election.AliveFunc {
	if m.members == nil {
		return nil
	}
	return m.members.Alive
}

// SetNodes takes every node the watch knows (reconcile.Config.OnNodes):
// the other nodes' addresses are membership's peers; the announcers get
// the ready nodes their node selector picks (the cloud's load balancers
// front them), and those waiting for this node start. The announcers
// take them on their owners' goroutines.
func (m *Manager) SetNodes(nodes map[string]*model.Node) {
	if m.members != nil {
		var peers []membership.Peer
		for _, name := range slices.Sorted(maps.Keys(nodes)) {
			// Every NodePort address (InternalIP and ExternalIP) is a
			// peer address; joining needs one to answer.
			for _, a := range nodes[name].Addresses {
				peers = append(peers, membership.Peer{Name: name, Addr: a.String(), NotReady: !nodes[name].Ready})
			}
		}
		m.members.SetPeers(peers)
	}
	m.mu.Lock()
	m.nodes = nodes
	m.selfKnown = m.selfKnown || nodes[m.cfg.NodeName] != nil
	m.mu.Unlock()
	m.nodesChanged()
}

// Intent is what stopping now would mean for this node, from its Node as
// the watch last reported it (ShutdownIntent): a restart, or the node
// going away. Close acts on it; the layer-2 side may too.
func (m *Manager) Intent() Intent {
	m.mu.Lock()
	defer m.mu.Unlock()
	return ShutdownIntent(m.nodes[m.cfg.NodeName], m.selfKnown)
}

func (m *Manager) nodesChanged() {
	for _, o := range m.owners {
		o.post(o.nodesChanged)
	}
}

// SetPools applies a reload of the pools: to the allocator, and to the
// announcers limited to some pools (with a sync, for them to announce
// or withdraw what moved).
func (m *Manager) SetPools(pools []config.Pool) error {
	ip := ipamPools(pools)
	m.mu.Lock()
	m.pools = ip
	m.mu.Unlock()
	for _, slot := range m.slots {
		slot.setPools(ip)
	}
	if len(m.slots) > 0 {
		m.cfg.Trigger()
	}
	if m.ipam == nil {
		if len(pools) > 0 {
			return errors.New("pools added to a daemon started without any: restart to allocate")
		}
		return nil
	}
	return m.ipam.SetPools(ip)
}

// SetAnnouncers applies a reload of the announcers when only their pools
// and node selectors changed (then a sync re-elects every address);
// otherwise it changes nothing and says what needs a restart: adding,
// removing, renaming or retyping announcers, their ARP, BGP or cloud
// settings.
func (m *Manager) SetAnnouncers(next []config.Announcer) error {
	if len(next) != len(m.slots) {
		return fmt.Errorf("announcers added or removed (%d, now %d)", len(m.slots), len(next))
	}
	for i, slot := range m.slots {
		if next[i].Name != slot.name {
			return fmt.Errorf("announcer %s renamed or moved (now %s)", slot.name, next[i].Name)
		}
		if err := slot.reloadable(next[i]); err != nil {
			return err
		}
	}
	m.mu.Lock()
	pools := m.pools
	m.mu.Unlock()
	for i, slot := range m.slots {
		slot.apply(next[i], pools)
	}
	m.nodesChanged()
	m.cfg.Trigger()
	return nil
}

// Ready is the announcers' part of /readyz (see announcerHealth).
func (m *Manager) Ready() error { return m.health.err() }

// Run runs the background parts until ctx is done: the allocator's
// campaign, the watches of Secrets, gossip, and the trigger of a sync
// when membership changes (an address may change owner).
func (m *Manager) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	if m.ipam != nil {
		wg.Go(func() { m.ipam.Run(ctx) })
	}
	m.secrets.run(ctx, &wg)
	if m.members == nil {
		return
	}
	wg.Go(func() {
		if err := m.members.Run(ctx); err != nil {
			m.log.Error("membership", "err", err)
		}
	})
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-m.members.Changes():
				m.cfg.Trigger()
			}
		}
	})
}

// Close closes the announcers, in reverse order, each on its owner's
// goroutine, then leaves membership. It first decides, from this node's
// Node, whether the daemon is restarting or the node is going away
// (Intent), and logs it. The ARP and cloud announcers leave what they
// announced in place either way (neighbours keep their entries, the
// provider keeps serving), so a restart keeps that traffic flowing. The
// BGP speaker, for a restart with graceful restart enabled, ends its
// sessions without a NOTIFICATION, so routers keep its routes until the
// restarted daemon refreshes them (bgp.Speaker.CloseForRestart);
// otherwise it withdraws its routes and ends its sessions with a Cease,
// so routers move the traffic to other nodes at once (bgp.Speaker.Close).
// Membership, for a restart, leaves saying so: with a restart grace the
// other daemons keep this node's layer-2 addresses here until it is back
// (membership.CloseForRestart); otherwise they move them at once.
func (m *Manager) Close() error {
	m.closeOnce.Do(func() {
		var errs []error
		in := m.Intent()
		if len(m.owners) > 0 {
			m.log.Info("stopping the announcers", "restart", in.Restart, "reason", in.Reason)
		}
		for _, o := range slices.Backward(m.owners) {
			if err := o.close(in.Restart); err != nil {
				errs = append(errs, fmt.Errorf("announcer %s: %w", o.name, err))
			}
		}
		if m.events != nil {
			_ = m.events.close()
		}
		if m.members != nil {
			leave := m.members.Close
			if in.Restart {
				leave = m.members.CloseForRestart
			}
			errs = append(errs, leave(context.Background()))
		}
		m.closeErr = errors.Join(errs...)
	})
	return m.closeErr
}

// announcerCollector reports the running announcers' metrics at scrape
// time (the BGP sessions). It is unchecked: what it reports depends on
// the announcers running.
type announcerCollector struct{ m *Manager }

func (announcerCollector) Describe(chan<- *prometheus.Desc) {}

func (c announcerCollector) Collect(ch chan<- prometheus.Metric) {
	for _, o := range c.m.owners {
		if inst, _ := o.instance(); inst != nil && inst.Collect != nil {
			inst.Collect(ch)
		}
	}
}

// State returns the running announcers' parts of /debug/state, by
// announcer name; announcers without one are left out.
func (m *Manager) State() map[string]any {
	out := map[string]any{}
	for _, o := range m.owners {
		if inst, _ := o.instance(); inst != nil && inst.State != nil {
			out[o.name] = inst.State()
		}
	}
	return out
}
