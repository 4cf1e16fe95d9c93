package reconcile

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/switchyard-lb/switchyard/core/maglev"
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plan"
)

// DSRDataplane programs the dsr side of this node (ipvs.DSR): the peers'
// tunnels, the frontends' addresses and the table marking their packets.
// The frontends' own virtual services are the Dataplane's.
type DSRDataplane interface {
	Apply(model.DSRPlan) error
}

// DSRMarksReader is a DSRDataplane that reads back the peer marks the
// kernel holds (ipvs.DSR.PeerMarks): each peer's tunnel address and its
// mark. A restarted daemon gives every node still there the mark it had,
// so that its first apply rebuilds no peer's service: an ingress node's
// connections to a peer whose service is rebuilt are expired at their
// next packet (which is dropped) and rescheduled at its retransmission,
// and while both marks' services exist a packet that opens no connection
// may go to the wrong node, which resets the flow.
type DSRMarksReader interface {
	PeerMarks() (map[netip.Addr]uint32, error)
}

// DSRConfig is the dsr side a Loop drives: the settings every node of
// the cluster shares (dataplane.dsr) and the dataplane programming them.
type DSRConfig struct {
	Dataplane     DSRDataplane
	Encapsulation model.Encapsulation
	GUEPort       uint16
	Seed          uint32
	TableSize     uint64
	// LinkMTU is the inter-node path's MTU, for the MSS clamp.
	LinkMTU int
}

// dsrStage turns the dsr frontends of the plan (model.VirtualService
// DSRNodes) and the nodes into this node's model.DSRPlan and applies it
// when it changed. It rebuilds only the Maglev tables whose inputs
// changed: a Service's endpoints, or the marks or presence of its
// backend nodes; a node holding no backend joining or leaving rebuilds
// none, and peers keep their marks (plan.DSRMarks).
type dsrStage struct {
	cfg   DSRConfig
	marks plan.DSRMarks
	// frontends are the dsr frontends of the plan by Service, as last
	// tracked.
	frontends map[model.ServiceKey][]model.VirtualService
	tables    map[model.VirtualServiceKey]dsrTable
	applied   *model.DSRPlan // last applied successfully; nil: none or failed
	// ever is set while the kernel may hold dsr frontends this process
	// applied: until an empty plan is applied after them.
	ever bool
	// dirty is set when a change may change the plan: a dsr Service's
	// plan, or the nodes.
	dirty bool
	// planned is the plan release made in this round, which sync applies
	// rather than planning again; track drops it when a round starts.
	planned *dsrPlanned
	// seeded is set once the marks the kernel holds from an earlier run
	// were read (DSRMarksReader), so that a restart keeps them.
	seeded bool
	// viewOf and viewMarks are the plan and marks version lastView
	// renders (view).
	viewOf    *model.DSRPlan
	viewMarks uint64
	lastView  *DSRState
}

// dsrPlanned is a plan with the frontends that failed to plan.
type dsrPlanned struct {
	plan *model.DSRPlan
	errs []error
}

// dsrTable is one frontend's planned table and what it was planned from.
type dsrTable struct {
	sig   string
	slots model.DSRFrontend
	peers []string // the other nodes its slots name, sorted
}

func newDSRStage(cfg DSRConfig) *dsrStage {
	return &dsrStage{cfg: cfg, frontends: map[model.ServiceKey][]model.VirtualService{}, tables: map[model.VirtualServiceKey]dsrTable{}}
}

// isDSR reports whether a Service's plan has a dsr frontend.
func isDSR(sp *model.ServicePlan) bool {
	return sp != nil && slices.ContainsFunc(sp.VirtualServices, func(v model.VirtualService) bool { return v.DSRNodes != nil })
}

// track records the dsr frontends of the changed Services (of all on a
// full sync).
func (s *dsrStage) track(p *model.Plan, changed []model.ServiceKey, full bool) {
	s.planned = nil
	set := func(k model.ServiceKey, sp *model.ServicePlan) {
		if _, had := s.frontends[k]; had || isDSR(sp) {
			s.dirty = true
		}
		delete(s.frontends, k)
		if sp == nil {
			return
		}
		for _, v := range sp.VirtualServices {
			if v.DSRNodes != nil {
				s.frontends[k] = append(s.frontends[k], v)
			}
		}
	}
	if full {
		clear(s.frontends)
		for k, sp := range p.Services {
			set(k, sp)
		}
		return
	}
	for _, k := range changed {
		set(k, p.Services[k])
	}
}

// dsrAddr is the address a node is tunnelled to: its primary IPv4 (the
// first InternalIP, else the first ExternalIP, as kube-proxy picks node
// IPs); invalid when it has none. With v6, its primary IPv6 instead,
// where IPv6 frontends' flows are tunnelled (ip6ip6).
func dsrAddr(n *model.Node, v6 bool) netip.Addr {
	for _, t := range []model.NodeAddressType{model.NodeInternalIP, model.NodeExternalIP} {
		for _, a := range n.IPs(t) {
			if a.Is4() != v6 {
				return a
			}
		}
	}
	return netip.Addr{}
}

// sync plans and applies the dsr side for self among nodes; full applies
// even an unchanged plan (the periodic repair).
func (s *dsrStage) sync(self string, nodes map[string]*model.Node, full bool) error {
	if !full && !s.dirty && s.applied != nil {
		return nil
	}
	if len(s.frontends) == 0 && !s.ever {
		return nil // nothing in dsr mode, now or before: touch nothing
	}
	var base *model.DSRPlan
	var errs []error
	if p := s.planned; p != nil {
		base, errs, s.planned = p.plan, p.errs, nil
	} else {
		var err error
		if base, errs, err = s.plan(self, nodes); err != nil || base == nil {
			return err
		}
	}
	// A frontend that failed to plan is left out rather than the whole
	// plan held back: its error is returned after the rest is applied.
	if full || s.applied == nil || !equalDSRPlans(*s.applied, *base) {
		s.applied = nil
		if err := s.cfg.Dataplane.Apply(*base); err != nil {
			return errors.Join(append(errs, fmt.Errorf("dsr: %w", err))...)
		}
		s.applied = base
		s.ever = len(base.Frontends) > 0
	}
	s.dirty = len(errs) > 0
	return errors.Join(errs...)
}

// release runs before the Dataplane applies a change: it applies at once
// the new tables in which this node serves no slot it did not serve
// before (its last local endpoints leaving, or a node joining a table),
// keeping the last applied ones for the rest. Otherwise the Dataplane
// would remove this node's local endpoints while its table still keeps
// their slots here, and until sync applies the new table (seconds on a
// loaded node) the flows hashing to them would be refused: IPVS answers
// for a frontend without a destination. The tables in which this node
// gains slots wait for sync, after the Dataplane, as before.
func (s *dsrStage) release(self string, nodes map[string]*model.Node) error {
	if !s.dirty || s.applied == nil {
		return nil
	}
	next, errs, err := s.plan(self, nodes)
	if err != nil || next == nil {
		return nil // sync, after the Dataplane, plans again and reports it
	}
	s.planned = &dsrPlanned{plan: next, errs: errs}
	pre, ok := releasePlan(*s.applied, *next)
	if !ok || equalDSRPlans(*s.applied, pre) {
		return nil
	}
	s.applied = nil
	if err := s.cfg.Dataplane.Apply(pre); err != nil {
		return fmt.Errorf("dsr: before the dataplane: %w", err)
	}
	s.applied = &pre
	return nil
}

// releasePlan is last with the frontends of next in which this node
// gains no slot, and the peers of both; ok is false when anything else
// differs (this node's addresses, the encapsulation, the seed), which
// waits for sync whole.
func releasePlan(last, next model.DSRPlan) (pre model.DSRPlan, ok bool) {
	if last.Addr != next.Addr || last.Addr6 != next.Addr6 || last.Encapsulation != next.Encapsulation ||
		last.GUEPort != next.GUEPort || last.Seed != next.Seed || last.MSS != next.MSS || last.MSS6 != next.MSS6 {
		return model.DSRPlan{}, false
	}
	nextFrontends := make(map[model.VirtualServiceKey]model.DSRFrontend, len(next.Frontends))
	for _, f := range next.Frontends {
		nextFrontends[f.VirtualServiceKey] = f
	}
	pre = last
	pre.Frontends = make([]model.DSRFrontend, 0, len(last.Frontends))
	for _, f := range last.Frontends {
		if n, ok := nextFrontends[f.VirtualServiceKey]; ok && !gainsSlots(f.Slots, n.Slots) {
			f = n
		}
		pre.Frontends = append(pre.Frontends, f)
	}
	peers := make(map[string]model.DSRPeer, len(last.Peers)+len(next.Peers))
	for _, p := range slices.Concat(last.Peers, next.Peers) {
		peers[p.Name] = p // next's last: a peer keeps its mark (plan.DSRMarks)
	}
	pre.Peers = nil
	marks := make(map[uint32]bool, len(peers))
	for _, name := range slices.Sorted(maps.Keys(peers)) {
		p := peers[name]
		if marks[p.Mark] {
			// A node that left gave its mark to one that joined, while
			// a kept table still names the first: wait for sync.
			return model.DSRPlan{}, false
		}
		marks[p.Mark] = true
		pre.Peers = append(pre.Peers, p)
	}
	return pre, true
}

// gainsSlots reports whether this node serves a slot in table next
// (mark 0) that it did not in last. An empty table leaves every slot
// here.
func gainsSlots(last, next []uint32) bool {
	switch {
	case len(last) == 0:
		return false
	case len(next) == 0 || len(next) != len(last):
		return true
	}
	for i, m := range next {
		if m == 0 && last[i] != 0 {
			return true
		}
	}
	return false
}

// plan is this node's dsr plan, nil when this node's Node is not known
// yet; errs are the frontends that failed to plan, left out of it.
func (s *dsrStage) plan(self string, nodes map[string]*model.Node) (*model.DSRPlan, []error, error) {
	me := nodes[self]
	if me == nil {
		return nil, nil, nil // this node's Node is not known yet
	}
	addrs := make(map[string]netip.Addr, len(nodes))
	addrs6 := make(map[string]netip.Addr, len(nodes))
	for name, n := range nodes {
		if a := dsrAddr(n, false); a.IsValid() {
			addrs[name] = a
		}
		if a := dsrAddr(n, true); a.IsValid() {
			addrs6[name] = a
		}
	}
	selfAddr, ok := addrs[self]
	if !ok {
		return nil, nil, fmt.Errorf("dsr: this node %s has no IPv4 InternalIP or ExternalIP to tunnel to", self)
	}
	if err := s.seed(addrs, addrs6); err != nil {
		return nil, nil, err
	}
	marks, err := s.marks.Assign(slices.Collect(maps.Keys(addrs)))
	if err != nil {
		return nil, nil, err
	}
	// The IPv6 side (ip6ip6, or GUE over IPv6) when some frontend is
	// IPv6 and this node has an IPv6 address; else those frontends fail
	// one by one (table) and the rest is applied.
	v6 := false
	for _, vs := range s.frontends {
		v6 = v6 || slices.ContainsFunc(vs, func(v model.VirtualService) bool { return v.Addr.Is6() })
	}
	v6 = v6 && addrs6[self].IsValid()
	base, err := plan.DSR(plan.DSRInput{
		Self: self, Nodes: []plan.DSRNode{{Name: self, Addr: selfAddr, Addr6: addrs6[self], Mark: marks[self]}},
		TableSize: s.cfg.TableSize, Seed: s.cfg.Seed, Encapsulation: s.cfg.Encapsulation,
		GUEPort: s.cfg.GUEPort, LinkMTU: s.cfg.LinkMTU, IPv6: v6,
	})
	if err != nil {
		return nil, nil, err
	}
	want := map[model.VirtualServiceKey]bool{}
	peers := map[string]bool{}
	var errs []error
	for _, k := range slices.SortedFunc(maps.Keys(s.frontends), model.ServiceKey.Compare) {
		for _, v := range s.frontends[k] {
			if want[v.VirtualServiceKey] {
				continue // the planner gives a key to one Service; never met
			}
			t, err := s.table(self, v, addrs, addrs6, marks)
			if err != nil {
				errs = append(errs, fmt.Errorf("service %s: %w", k, err))
				continue
			}
			want[v.VirtualServiceKey] = true
			base.Frontends = append(base.Frontends, t.slots)
			for _, p := range t.peers {
				peers[p] = true
			}
		}
	}
	for k := range s.tables {
		if !want[k] {
			delete(s.tables, k)
		}
	}
	slices.SortFunc(base.Frontends, func(a, b model.DSRFrontend) int { return a.Compare(b.VirtualServiceKey) })
	for _, name := range slices.Sorted(maps.Keys(peers)) {
		peer := model.DSRPeer{Name: name, Addr: addrs[name], Mark: marks[name]}
		if v6 {
			peer.Addr6 = addrs6[name]
		}
		base.Peers = append(base.Peers, peer)
	}
	return &base, errs, nil
}

// seed gives the nodes the marks the kernel holds for their addresses,
// once, before the first plan (DSRMarksReader); a read that fails is
// retried at the next plan.
func (s *dsrStage) seed(addrs, addrs6 map[string]netip.Addr) error {
	r, ok := s.cfg.Dataplane.(DSRMarksReader)
	if s.seeded || !ok {
		return nil
	}
	held, err := r.PeerMarks()
	if err != nil {
		return fmt.Errorf("dsr: read the peer marks of an earlier run: %w", err)
	}
	kept := map[string]uint32{}
	for _, by := range []map[string]netip.Addr{addrs, addrs6} {
		for name, a := range by {
			if m, ok := held[a]; ok {
				kept[name] = m
			}
		}
	}
	s.marks.Keep(kept)
	s.seeded = true
	return nil
}

// table returns a frontend's table, planned again only when its inputs
// changed.
func (s *dsrStage) table(self string, v model.VirtualService, addrs, addrs6 map[string]netip.Addr, marks map[string]uint32) (dsrTable, error) {
	// The backends that can be tunnelled to: a node unknown or without
	// an IPv4 address (an IPv6 one for an IPv6 frontend) cannot (it is
	// left out on every node alike, once their views of the Nodes
	// agree).
	v6 := v.Addr.Is6()
	var sig strings.Builder
	sig.WriteString(strconv.FormatUint(uint64(marks[self]), 16))
	nodes := []plan.DSRNode{{Name: self, Addr: addrs[self], Addr6: addrs6[self], Mark: marks[self]}}
	var backends []maglev.Backend
	for _, b := range v.DSRNodes {
		a, ok := addrs[b.Node]
		if _, has6 := addrs6[b.Node]; !ok || (v6 && !has6) || b.Weight == 0 {
			continue
		}
		backends = append(backends, maglev.Backend{Name: b.Node, Weight: b.Weight})
		fmt.Fprintf(&sig, " %s/%d/%x", b.Node, b.Weight, marks[b.Node])
		if b.Node != self {
			nodes = append(nodes, plan.DSRNode{Name: b.Node, Addr: a, Addr6: addrs6[b.Node], Mark: marks[b.Node]})
		}
	}
	if t, ok := s.tables[v.VirtualServiceKey]; ok && t.sig == sig.String() {
		return t, nil
	}
	p, err := plan.DSR(plan.DSRInput{
		Self: self, Nodes: nodes, TableSize: s.cfg.TableSize, Seed: s.cfg.Seed,
		Encapsulation: s.cfg.Encapsulation, GUEPort: s.cfg.GUEPort,
		Frontends: []plan.DSRFrontendInput{{Key: v.VirtualServiceKey, Backends: backends}},
	})
	if err != nil {
		return dsrTable{}, err
	}
	t := dsrTable{sig: sig.String(), slots: p.Frontends[0]}
	for _, peer := range p.Peers {
		t.peers = append(t.peers, peer.Name)
	}
	s.tables[v.VirtualServiceKey] = t
	return t, nil
}

func equalDSRPlans(a, b model.DSRPlan) bool {
	return a.Addr == b.Addr && a.Addr6 == b.Addr6 && a.Encapsulation == b.Encapsulation && a.GUEPort == b.GUEPort &&
		a.Seed == b.Seed && a.MSS == b.MSS && a.MSS6 == b.MSS6 && slices.Equal(a.Peers, b.Peers) &&
		slices.EqualFunc(a.Frontends, b.Frontends, func(x, y model.DSRFrontend) bool {
			return x.VirtualServiceKey == y.VirtualServiceKey && slices.Equal(x.Slots, y.Slots)
		})
}
