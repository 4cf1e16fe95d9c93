package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/switchyard-lb/switchyard/announcers/arp"
	"github.com/switchyard-lb/switchyard/announcers/bgp"
	"github.com/switchyard-lb/switchyard/announcers/cloud"
	"github.com/switchyard-lb/switchyard/announcers/report"
	"github.com/switchyard-lb/switchyard/core/config"
	"github.com/switchyard-lb/switchyard/core/election"
	"github.com/switchyard-lb/switchyard/core/ipam"
	"github.com/switchyard-lb/switchyard/core/lbipam"
	"github.com/switchyard-lb/switchyard/core/membership"
	"github.com/switchyard-lb/switchyard/core/metrics"
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/core/reconcile"
)

// scrapeTimeout bounds the BGP session query of one scrape.
const scrapeTimeout = 2 * time.Second

// loadBalancing is the LoadBalancer machinery the config asks for: the
// address allocator (with pools), the announcers, elected through gossip
// membership and Kubernetes readiness. Without pools and announcers it
// is empty and the daemon behaves as without it.
type loadBalancing struct {
	log     *slog.Logger
	elected []reconcile.ElectedAnnouncer
	bgp     []*bgp.Speaker
	members *membership.Membership
	ipam    *lbipam.Controller
	closers []func() error
	// passwords keeps BGP peers' passwords in step with their Secrets;
	// nil when no peer has a passwordSecret.
	passwords *bgpPasswords
	// slots are the announcers' settings a reload may change, in
	// config order.
	slots []*announcerSlot
	mu    sync.Mutex
	// pools and nodes are the last pools and nodes, for reloads.
	pools []ipam.Pool
	nodes map[string]*model.Node
	// trigger asks the loop for a sync; set by run.
	trigger func()
	// health is the announcers' part of /readyz; nil without announcers.
	health *announcerHealth
	// rotation applies changes of the gossip keys' Secret; nil without
	// membership.secretKeySecret.
	rotation *gossipRotation
	// client and ns are where Secrets are read: the daemon's namespace.
	client kubernetes.Interface
	ns     string
}

// newLoadBalancing builds what cfg configures; on error it releases what
// it built.
func newLoadBalancing(ctx context.Context, dc daemonConfig, cfg *config.Config, reg prometheus.Registerer) (_ *loadBalancing, err error) {
	lb := &loadBalancing{
		log:    dc.Log.With("component", "loadbalancing"),
		ns:     daemonNamespace(os.Getenv("POD_NAMESPACE"), os.ReadFile),
		client: dc.Client,
	}
	defer func() {
		if err != nil {
			lb.close()
		}
	}()
	pools := ipamPools(cfg.Pools)
	lb.pools = pools
	if len(pools) > 0 {
		c, err := lbipam.New(lbipam.Config{
			Client:          dc.Client,
			Identity:        dc.NodeName,
			Pools:           pools,
			Class:           cfg.LoadBalancerClass,
			IgnoreUnclassed: cfg.IgnoreUnclassed,
			LeaseNamespace:  lbipam.DefaultLeaseNamespace,
			Log:             dc.Log,
		})
		if err != nil {
			return nil, err
		}
		lb.ipam = c
		reg.MustRegister(&poolCollector{stats: c.Stats})
	}
	if len(cfg.Announcers) == 0 {
		return lb, nil
	}

	keys, err := gossipKeys(ctx, dc.Client, lb.ns, cfg.Membership)
	if err != nil {
		return nil, err
	}
	m, err := membership.New(membership.Config{
		NodeName: dc.NodeName,
		BindAddr: cfg.Membership.BindAddress,
		BindPort: cfg.Membership.Port,
		Keys:     keys,
		Logger:   dc.Log.With("component", "membership"),
		// core/config documents the trade; unset means on.
		DisableQuorumGuard: cfg.Membership.QuorumGuard != nil && !*cfg.Membership.QuorumGuard,
	})
	if err != nil {
		return nil, err
	}
	lb.members = m
	if ref := cfg.Membership.SecretKeySecret; ref != nil {
		lb.rotation = &gossipRotation{ns: lb.ns, ref: *ref, m: m, log: lb.log}
	}
	lb.closers = append(lb.closers, func() error { return m.Close(context.Background()) })
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Name: "membership_members",
		Help: "Daemons gossip membership knows alive, this one included.",
	}, func() float64 { return float64(m.Size()) }))

	lb.health = newAnnouncerHealth(nil)
	events := newAnnounceEvents(dc)
	lb.closers = append(lb.closers, events.close)
	var self *model.Node // fetched once, for BGP defaults and peer selectors
	for _, ac := range cfg.Announcers {
		slot := newAnnouncerSlot(ac, pools)
		lb.slots = append(lb.slots, slot)
		ea := reconcile.ElectedAnnouncer{Mode: election.Layer2, Serves: slot.serves, Selector: slot}
		switch ac.Type {
		case config.AnnouncerARP:
			var ifaces []string // none: every suitable interface
			if ac.ARP != nil {
				ifaces = ac.ARP.Interfaces
			}
			a, err := arp.Listen(ifaces, arp.Options{
				OnError: func(link string, err error) {
					lb.log.Warn("arp announcer", "announcer", ac.Name, "link", link, "err", err)
				},
			})
			if err != nil {
				return nil, fmt.Errorf("announcer %s: %w", ac.Name, err)
			}
			lb.closers = append(lb.closers, a.Close)
			lb.health.add(announcerCheck{name: ac.Name, probe: a.Healthy, grace: arpGrace})
			ea.Announcer = events.wrap(named{a, ac.Name}, false)
		case config.AnnouncerCloud:
			// The webhook calls happen in the background: their failures
			// reach the Events through OnCall.
			var reporter atomic.Pointer[report.Announcer]
			a, err := cloud.New(cloud.Options{
				URL:       ac.Cloud.URL,
				NodeName:  dc.NodeName,
				TokenFile: ac.Cloud.TokenFile,
				Timeout:   ac.Cloud.Timeout.Std(),
				OnCall: func(c cloud.Call) {
					if r := reporter.Load(); r != nil {
						r.Result(c.Addr, c.Op == cloud.OpRelease, c.Err)
					}
					if c.Err != nil {
						lb.log.Warn("cloud webhook", "announcer", ac.Name, "op", c.Op, "address", c.Addr, "status", c.Status, "retry", c.Retry, "err", c.Err)
					} else {
						lb.log.Debug("cloud webhook", "announcer", ac.Name, "op", c.Op, "address", c.Addr, "status", c.Status, "took", c.Duration)
					}
				},
			})
			if err != nil {
				return nil, fmt.Errorf("announcer %s: %w", ac.Name, err)
			}
			lb.closers = append(lb.closers, a.Close)
			slot.cloud = a
			r := events.wrap(named{a, ac.Name}, true)
			reporter.Store(r)
			ea.Announcer = r
			// The load balancer sends traffic to other nodes: each
			// address goes only to the nodes serving it (with
			// externalTrafficPolicy Local, those with a ready endpoint).
			ea.WithNodes = true
		case config.AnnouncerBGP:
			if self == nil {
				if self, err = getNode(ctx, dc); err != nil {
					return nil, fmt.Errorf("announcer %s: %w", ac.Name, err)
				}
			}
			bc, secrets, err := bgpConfig(ac, self)
			if err != nil {
				return nil, fmt.Errorf("announcer %s: %w", ac.Name, err)
			}
			if len(secrets) > 0 && lb.passwords == nil {
				lb.passwords = newBGPPasswords(dc.Client, lb.ns, lb.log)
			}
			initial := make([]error, len(secrets))
			for i, sp := range secrets {
				pw, err := lb.passwords.initial(ctx, sp.ref)
				if err != nil {
					// The other peers come up; this one when its Secret does.
					initial[i] = fmt.Errorf("bgp peer %s: password: %w", sp.peer, err)
					lb.log.Error("bgp peer stays down until its password Secret is readable", "announcer", ac.Name, "peer", sp.peer, "err", initial[i])
					continue
				}
				j := slices.IndexFunc(bc.Peers, func(p bgp.Peer) bool { return p.Address == sp.peer })
				bc.Peers[j].Password, bc.Peers[j].AdminDown = pw, false
			}
			s, err := bgp.New(ctx, bc, dc.Log.With("component", "bgp"))
			if err != nil {
				return nil, fmt.Errorf("announcer %s: %w", ac.Name, err)
			}
			for i, sp := range secrets {
				sp.speaker = s
				lb.passwords.add(sp, initial[i])
			}
			lb.closers = append(lb.closers, s.Close)
			lb.bgp = append(lb.bgp, s)
			lb.health.add(announcerCheck{name: ac.Name, probe: lb.bgpProbe(ac.Name, s), grace: maxHoldTime(bc.Peers)})
			ea.Announcer = events.wrap(s, false)
			ea.Mode = election.BGP
		default:
			return nil, fmt.Errorf("announcer %s: unknown type %q", ac.Name, ac.Type)
		}
		lb.elected = append(lb.elected, ea)
	}
	if len(lb.bgp) > 0 {
		reg.MustRegister(&bgpCollector{speakers: lb.bgp})
	}
	return lb, nil
}

// alive is the election's view of gossip membership; nil without it.
func (lb *loadBalancing) alive() election.AliveFunc {
	if lb.members == nil {
		return nil
	}
	return lb.members.Alive
}

// setNodes feeds the nodes the loop knows to membership (the other
// nodes' addresses are its peers) and to the cloud announcers (the ready
// nodes their node selector picks are what the load balancers front).
func (lb *loadBalancing) setNodes(nodes map[string]*model.Node) {
	names := slices.Sorted(maps.Keys(nodes))
	if lb.members != nil {
		var peers []membership.Peer
		for _, name := range names {
			// model.Node does not tell InternalIPs from ExternalIPs:
			// every address is a peer address; joining needs one to answer.
			for _, a := range nodes[name].Addresses {
				peers = append(peers, membership.Peer{Name: name, Addr: a.String()})
			}
		}
		lb.members.SetPeers(peers)
	}
	lb.mu.Lock()
	defer lb.mu.Unlock()
	lb.nodes = nodes
	lb.setCloudNodesLocked()
}

// setCloudNodesLocked gives each cloud announcer the ready nodes its
// node selector picks: what its load balancers front, narrowed per
// address by the announcements' Nodes (ElectedAnnouncer.WithNodes). Called with mu
// held, so that a reload and a node change never pass stale nodes.
func (lb *loadBalancing) setCloudNodesLocked() {
	nodes := lb.nodes
	names := slices.Sorted(maps.Keys(nodes))
	for _, slot := range lb.slots {
		if slot.cloud == nil {
			continue
		}
		var front []cloud.Node
		for _, name := range names {
			n := nodes[name]
			if n.Ready && slot.Matches(n.Labels) {
				front = append(front, cloud.Node{Name: name, Addrs: n.Addresses})
			}
		}
		if err := slot.cloud.SetNodes(front); err != nil {
			lb.log.Warn("cloud announcer: set nodes", "announcer", slot.name, "err", err)
		}
	}
}

// run runs the background parts until ctx is done: the allocator's
// campaign, gossip, and the trigger of a sync when membership changes
// (an address may change owner).
func (lb *loadBalancing) run(ctx context.Context, wg *sync.WaitGroup, trigger func()) {
	lb.trigger = trigger
	if lb.ipam != nil {
		wg.Go(func() { lb.ipam.Run(ctx) })
	}
	if lb.passwords != nil {
		lb.passwords.run(ctx, wg)
	}
	if g := lb.rotation; g != nil {
		watchSecret(ctx, wg, lb.client, g.ns, g.ref.Name, lb.log, g.apply)
	}
	if lb.members == nil {
		return
	}
	wg.Go(func() {
		if err := lb.members.Run(ctx); err != nil {
			lb.log.Error("membership", "err", err)
		}
	})
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-lb.members.Changes():
				trigger()
			}
		}
	})
}

// ready is the announcers' readiness (see announcerHealth).
func (lb *loadBalancing) ready() error { return lb.health.err() }

// bgpProbe is a BGP announcer's readiness probe: no session established,
// with its peers' password failures as the likely reason.
func (lb *loadBalancing) bgpProbe(name string, s *bgp.Speaker) func() error {
	return func() error {
		err := s.Healthy()
		if err != nil && lb.passwords != nil {
			err = errors.Join(err, lb.passwords.failures(name))
		}
		return err
	}
}

// maxHoldTime is the longest hold time of peers (bgp.DefaultHoldTime
// where unset), the BGP announcer's readiness grace.
func maxHoldTime(peers []bgp.Peer) time.Duration {
	d := time.Duration(0)
	for _, p := range peers {
		h := p.HoldTime
		if h == 0 {
			h = bgp.DefaultHoldTime
		}
		d = max(d, h)
	}
	return d
}

// setPools applies a reload of the pools: to the allocator, and to the
// announcers limited to some pools (with a sync, for them to announce
// or withdraw what moved).
func (lb *loadBalancing) setPools(pools []config.Pool) error {
	ip := ipamPools(pools)
	lb.mu.Lock()
	lb.pools = ip
	lb.mu.Unlock()
	for _, slot := range lb.slots {
		slot.setPools(ip)
	}
	if len(lb.slots) > 0 && lb.trigger != nil {
		lb.trigger()
	}
	if lb.ipam == nil {
		if len(pools) > 0 {
			return errors.New("pools added to a daemon started without any: restart to allocate")
		}
		return nil
	}
	return lb.ipam.SetPools(ip)
}

// close leaves membership and closes the announcers; none withdraws
// what it announced (the Announcer contract), so a restart keeps
// traffic flowing.
func (lb *loadBalancing) close() error {
	var errs []error
	for _, c := range slices.Backward(lb.closers) {
		errs = append(errs, c())
	}
	lb.closers = nil
	return errors.Join(errs...)
}

// ipamPools converts the config's pools.
func ipamPools(pools []config.Pool) []ipam.Pool {
	out := make([]ipam.Pool, 0, len(pools))
	for _, p := range pools {
		out = append(out, ipam.Pool{
			Name:               p.Name,
			Addresses:          slices.Clone(p.Addresses),
			AutoAssign:         p.AutoAssign == nil || *p.AutoAssign,
			AvoidBuggyIPs:      p.AvoidBuggyIPs,
			Namespaces:         slices.Clone(p.Namespaces),
			NamespaceSelectors: ipamSelectors(p.NamespaceSelectors),
			ServiceSelectors:   ipamSelectors(p.ServiceSelectors),
		})
	}
	return out
}

func ipamSelectors(ss []config.LabelSelector) []ipam.Selector {
	var out []ipam.Selector
	for _, s := range ss {
		sel := ipam.Selector{MatchLabels: s.MatchLabels}
		for _, r := range s.MatchExpressions {
			sel.MatchExpressions = append(sel.MatchExpressions,
				ipam.Requirement{Key: r.Key, Operator: ipam.Operator(r.Operator), Values: r.Values})
		}
		out = append(out, sel)
	}
	return out
}

// named gives an announcer its name from the config, for /debug/state and
// switchyard_announced_ips (the ARP and cloud announcers name their type).
type named struct {
	plugin.Announcer
	name string
}

func (n named) Name() string { return n.name }

// Healthy passes on the announcer's health when it reports one.
func (n named) Healthy() error {
	if h, ok := n.Announcer.(plugin.HealthReporter); ok {
		return h.Healthy()
	}
	return nil
}

// getNode reads this node once (for BGP's router ID and peer selectors).
func getNode(ctx context.Context, dc daemonConfig) (*model.Node, error) {
	n, err := dc.Client.CoreV1().Nodes().Get(ctx, dc.NodeName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read node %s: %w", dc.NodeName, err)
	}
	out := &model.Node{Name: n.Name, Labels: n.Labels}
	for _, a := range n.Status.Addresses {
		if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == corev1.NodeInternalIP {
			out.Addresses = append(out.Addresses, ip)
		}
	}
	return out, nil
}

// bgpConfig translates an announcer's BGP block for this node: the
// router ID defaults to its first IPv4 InternalIP, and peers whose node
// selector it does not match are left out. Peers with a passwordSecret
// are AdminDown and returned in secrets, for the caller to resolve.
func bgpConfig(ac config.Announcer, self *model.Node) (bc bgp.Config, secrets []*secretPeer, err error) {
	b := ac.BGP
	bc = bgp.Config{Name: ac.Name, LocalASN: b.ASN, ListenPort: b.ListenPort}
	if b.RouterID != "" {
		id, err := netip.ParseAddr(b.RouterID)
		if err != nil {
			return bc, nil, fmt.Errorf("routerID: %w", err)
		}
		bc.RouterID = id
	} else if i := slices.IndexFunc(self.Addresses, netip.Addr.Is4); i >= 0 {
		bc.RouterID = self.Addresses[i]
	} else {
		return bc, nil, fmt.Errorf("no routerID configured and node %s has no IPv4 InternalIP", self.Name)
	}
	for _, p := range b.Peers {
		if !labels.SelectorFromSet(p.NodeSelector).Matches(labels.Set(self.Labels)) {
			continue
		}
		addr, err := netip.ParseAddr(p.Address)
		if err != nil {
			return bc, nil, fmt.Errorf("peer %s: %w", p.Address, err)
		}
		bp := bgp.Peer{
			Address: addr, ASN: p.ASN, Port: uint16(p.Port),
			HoldTime: p.HoldTime.Std(), KeepaliveTime: p.KeepaliveTime.Std(),
			EBGPMultihopTTL: uint8(min(p.EBGPMultihop, 255)),
			Communities:     p.Communities, LocalPref: p.LocalPreference,
		}
		switch {
		case p.PasswordFile != "":
			pw, err := os.ReadFile(p.PasswordFile)
			if err != nil {
				return bc, nil, fmt.Errorf("peer %s: password: %w", p.Address, err)
			}
			bp.Password = strings.TrimSpace(string(pw))
		case p.PasswordSecret != nil:
			// Down until the Secret's password is known: a peer never
			// connects without its key.
			bp.AdminDown = true
			secrets = append(secrets, &secretPeer{announcer: ac.Name, peer: addr, ref: *p.PasswordSecret})
		}
		bc.Peers = append(bc.Peers, bp)
	}
	return bc, secrets, nil
}

// poolCollector reports the allocator's pools while it leads.
type poolCollector struct{ stats func() []ipam.PoolStats }

var (
	poolTotalDesc = prometheus.NewDesc(metrics.Namespace+"_pool_addresses_total",
		"Addresses a pool may hand out; reported by the allocating daemon only.", []string{"pool"}, nil)
	poolUsedDesc = prometheus.NewDesc(metrics.Namespace+"_pool_addresses_used",
		"Addresses of a pool held by Services; reported by the allocating daemon only.", []string{"pool"}, nil)
	bgpSessionDesc = prometheus.NewDesc(metrics.Namespace+"_bgp_session_up",
		"1 when the BGP session with the peer is established.", []string{"announcer", "peer"}, nil)
)

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) { ch <- poolTotalDesc; ch <- poolUsedDesc }

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.stats() {
		ch <- prometheus.MustNewConstMetric(poolTotalDesc, prometheus.GaugeValue, float64(s.Total), s.Pool)
		ch <- prometheus.MustNewConstMetric(poolUsedDesc, prometheus.GaugeValue, float64(s.Used), s.Pool)
	}
}

// bgpCollector reports every speaker's sessions at scrape time.
type bgpCollector struct{ speakers []*bgp.Speaker }

func (c *bgpCollector) Describe(ch chan<- *prometheus.Desc) { ch <- bgpSessionDesc }

func (c *bgpCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	for _, s := range c.speakers {
		sessions, err := s.Sessions(ctx)
		if err != nil {
			ch <- prometheus.NewInvalidMetric(bgpSessionDesc, err)
			continue
		}
		for _, x := range sessions {
			up := 0.0
			if x.Up {
				up = 1
			}
			ch <- prometheus.MustNewConstMetric(bgpSessionDesc, prometheus.GaugeValue, up, s.Name(), x.Peer.String())
		}
	}
}
