package reconcile

import (
	"net/netip"

	"github.com/switchyard-lb/switchyard/core/model"
)

// DSRState is the dsr side this node last applied, in State (its
// /debug/state "dsr"): the settings, every node's peer mark, the peers
// it tunnels to, and per dsr frontend how its Maglev table's slots fall
// on the nodes and this node's role for the address.
type DSRState struct {
	Encapsulation string     `json:"encapsulation"`
	GUEPort       uint16     `json:"guePort,omitempty"`
	Seed          uint32     `json:"seed"`
	Address       netip.Addr `json:"address"`
	Address6      netip.Addr `json:"address6,omitzero"`
	MSS           uint16     `json:"mss,omitempty"`
	MSS6          uint16     `json:"mss6,omitempty"`
	// Marks is every node's peer mark on this node (marks are local to a
	// node: they need not agree across nodes, and survive a restart).
	Marks     map[string]uint32  `json:"marks"`
	Peers     []DSRPeerState     `json:"peers,omitempty"`
	Frontends []DSRFrontendState `json:"frontends,omitempty"`
}

// DSRPeerState is a node this one tunnels dsr flows to.
type DSRPeerState struct {
	Name     string     `json:"name"`
	Address  netip.Addr `json:"address"`
	Address6 netip.Addr `json:"address6,omitzero"`
	Mark     uint32     `json:"mark"`
}

// Roles of a node for a dsr frontend (DSRFrontendState.Role).
const (
	// DSRRoleBackend: the node serves some of the table's slots itself,
	// from its local endpoints (and forwards the others).
	DSRRoleBackend = "backend"
	// DSRRoleIngress: the node serves no slot: every flow it receives
	// is tunnelled to the node its slot names.
	DSRRoleIngress = "ingress"
)

// DSRFrontendState is one dsr frontend's table as this node holds it.
type DSRFrontendState struct {
	Protocol  string         `json:"protocol"`
	Address   netip.AddrPort `json:"address"`
	Role      string         `json:"role"`
	TableSize int            `json:"tableSize"`
	// Slots is how many slots of the table each node serves, by name
	// (this node's own included).
	Slots map[string]int `json:"slots"`
}

// dsrView renders p, applied by node self with marks, for State.
func dsrView(self string, p model.DSRPlan, marks map[string]uint32) *DSRState {
	st := &DSRState{
		Encapsulation: p.Encapsulation.String(), Seed: p.Seed, Address: p.Addr, Address6: p.Addr6,
		MSS: p.MSS, MSS6: p.MSS6, Marks: marks,
	}
	if p.Encapsulation == model.GUE {
		st.GUEPort = p.GUEPort
	}
	byMark := make(map[uint32]string, len(p.Peers))
	for _, peer := range p.Peers {
		byMark[peer.Mark] = peer.Name
		st.Peers = append(st.Peers, DSRPeerState{Name: peer.Name, Address: peer.Addr, Address6: peer.Addr6, Mark: peer.Mark})
	}
	for _, f := range p.Frontends {
		fs := DSRFrontendState{
			Protocol: f.Protocol.String(), Address: netip.AddrPortFrom(f.Addr, f.Port),
			Role: DSRRoleIngress, TableSize: len(f.Slots), Slots: map[string]int{},
		}
		for _, m := range f.Slots {
			name, ok := byMark[m]
			switch {
			case m == 0:
				name, fs.Role = self, DSRRoleBackend
			case !ok:
				name = "?" // a mark of no peer: never planned
			}
			fs.Slots[name]++
		}
		st.Frontends = append(st.Frontends, fs)
	}
	return st
}

// view is the dsr side last applied successfully, nil before any; it
// is rendered again only when a new plan was applied or a mark changed.
func (s *dsrStage) view(self string) *DSRState {
	if s.applied != nil && (s.applied != s.viewOf || s.marks.Version() != s.viewMarks) {
		s.viewOf, s.viewMarks = s.applied, s.marks.Version()
		s.lastView = dsrView(self, *s.applied, s.marks.Marks())
	}
	return s.lastView
}

// setDSRView publishes the dsr stage's view for State.
func (l *Loop) setDSRView() {
	if l.dsr == nil {
		return
	}
	v := l.dsr.view(l.cfg.NodeName)
	l.mu.Lock()
	l.dsrView = v
	l.mu.Unlock()
}
