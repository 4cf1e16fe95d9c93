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
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/switchyard-lb/switchyard/announcers/arp"
	"github.com/switchyard-lb/switchyard/announcers/bgp"
	"github.com/switchyard-lb/switchyard/announcers/cloud"
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
	clouds  []cloudAnnouncer
	bgp     []*bgp.Speaker
	members *membership.Membership
	ipam    *lbipam.Controller
	closers []func() error
}

// cloudAnnouncer is a cloud announcer with the node selector that picks
// the nodes its load balancers front.
type cloudAnnouncer struct {
	a        *cloud.Announcer
	selector labels.Selector
}

// newLoadBalancing builds what cfg configures; on error it releases what
// it built.
func newLoadBalancing(ctx context.Context, dc daemonConfig, cfg *config.Config, reg prometheus.Registerer) (_ *loadBalancing, err error) {
	lb := &loadBalancing{log: dc.Log.With("component", "loadbalancing")}
	defer func() {
		if err != nil {
			lb.close()
		}
	}()
	pools := ipamPools(cfg.Pools)
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

	m, err := membership.New(membership.Config{
		NodeName: dc.NodeName,
		BindAddr: cfg.Membership.BindAddress,
		BindPort: cfg.Membership.Port,
		Logger:   dc.Log.With("component", "membership"),
	})
	if err != nil {
		return nil, err
	}
	lb.members = m
	lb.closers = append(lb.closers, func() error { return m.Close(context.Background()) })
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Name: "membership_members",
		Help: "Daemons gossip membership knows alive, this one included.",
	}, func() float64 { return float64(m.Size()) }))

	var self *model.Node // fetched once, for BGP defaults and peer selectors
	for _, ac := range cfg.Announcers {
		ea := reconcile.ElectedAnnouncer{Mode: election.Layer2, Serves: servedBy(pools, ac.Pools)}
		if len(ac.NodeSelector) > 0 {
			ea.Selector = labelMatcher{labels.SelectorFromSet(ac.NodeSelector)}
		}
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
			ea.Announcer = named{a, ac.Name}
		case config.AnnouncerCloud:
			a, err := cloud.New(cloud.Options{
				URL:       ac.Cloud.URL,
				NodeName:  dc.NodeName,
				TokenFile: ac.Cloud.TokenFile,
				Timeout:   ac.Cloud.Timeout.Std(),
				OnCall: func(c cloud.Call) {
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
			lb.clouds = append(lb.clouds, cloudAnnouncer{a: a, selector: labels.SelectorFromSet(ac.NodeSelector)})
			ea.Announcer = named{a, ac.Name}
		case config.AnnouncerBGP:
			if self == nil {
				if self, err = getNode(ctx, dc); err != nil {
					return nil, fmt.Errorf("announcer %s: %w", ac.Name, err)
				}
			}
			bc, err := bgpConfig(ac, self)
			if err != nil {
				return nil, fmt.Errorf("announcer %s: %w", ac.Name, err)
			}
			s, err := bgp.New(ctx, bc, dc.Log.With("component", "bgp"))
			if err != nil {
				return nil, fmt.Errorf("announcer %s: %w", ac.Name, err)
			}
			lb.closers = append(lb.closers, s.Close)
			lb.bgp = append(lb.bgp, s)
			ea.Announcer = s
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
	for _, c := range lb.clouds {
		var front []cloud.Node
		for _, name := range names {
			n := nodes[name]
			if n.Ready && c.selector.Matches(labels.Set(n.Labels)) {
				front = append(front, cloud.Node{Name: name, Addrs: n.Addresses})
			}
		}
		if err := c.a.SetNodes(front); err != nil {
			lb.log.Warn("cloud announcer: set nodes", "err", err)
		}
	}
}

// run runs the background parts until ctx is done: the allocator's
// campaign, gossip, and the trigger of a sync when membership changes
// (an address may change owner).
func (lb *loadBalancing) run(ctx context.Context, wg *sync.WaitGroup, trigger func()) {
	if lb.ipam != nil {
		wg.Go(func() { lb.ipam.Run(ctx) })
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

// setPools applies a reload of the pools.
func (lb *loadBalancing) setPools(pools []config.Pool) error {
	if lb.ipam == nil {
		if len(pools) > 0 {
			return errors.New("pools added to a daemon started without any: restart to allocate")
		}
		return nil
	}
	return lb.ipam.SetPools(ipamPools(pools))
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

// servedBy returns whether an address lies in one of the named pools;
// nil (every address) when names is empty.
func servedBy(pools []ipam.Pool, names []string) func(netip.Addr) bool {
	if len(names) == 0 {
		return nil
	}
	var ranges []ipam.Range
	for _, p := range pools {
		if !slices.Contains(names, p.Name) {
			continue
		}
		for _, s := range p.Addresses {
			if r, err := ipam.ParseRange(s); err == nil { // validated with the config
				ranges = append(ranges, r)
			}
		}
	}
	return func(a netip.Addr) bool {
		return slices.ContainsFunc(ranges, func(r ipam.Range) bool { return r.Contains(a) })
	}
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

// labelMatcher adapts a Kubernetes label selector to election.Matcher.
type labelMatcher struct{ sel labels.Selector }

func (m labelMatcher) Matches(l map[string]string) bool { return m.sel.Matches(labels.Set(l)) }

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
// selector it does not match are left out.
func bgpConfig(ac config.Announcer, self *model.Node) (bgp.Config, error) {
	b := ac.BGP
	bc := bgp.Config{Name: ac.Name, LocalASN: b.ASN, ListenPort: b.ListenPort}
	if b.RouterID != "" {
		id, err := netip.ParseAddr(b.RouterID)
		if err != nil {
			return bc, fmt.Errorf("routerID: %w", err)
		}
		bc.RouterID = id
	} else if i := slices.IndexFunc(self.Addresses, netip.Addr.Is4); i >= 0 {
		bc.RouterID = self.Addresses[i]
	} else {
		return bc, fmt.Errorf("no routerID configured and node %s has no IPv4 InternalIP", self.Name)
	}
	for _, p := range b.Peers {
		if !labels.SelectorFromSet(p.NodeSelector).Matches(labels.Set(self.Labels)) {
			continue
		}
		addr, err := netip.ParseAddr(p.Address)
		if err != nil {
			return bc, fmt.Errorf("peer %s: %w", p.Address, err)
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
				return bc, fmt.Errorf("peer %s: password: %w", p.Address, err)
			}
			bp.Password = strings.TrimSpace(string(pw))
		case p.PasswordSecret != nil:
			return bc, fmt.Errorf("peer %s: passwordSecret: the daemon may not read Secrets; mount it and set passwordFile", p.Address)
		}
		bc.Peers = append(bc.Peers, bp)
	}
	return bc, nil
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
