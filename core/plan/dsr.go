package plan

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"

	"github.com/switchyard-lb/switchyard/core/maglev"
	"github.com/switchyard-lb/switchyard/core/model"
)

// DSRMark is the i-th firewall mark a dsr peer can have (i from 0 to
// dsrMarks-1): (i+1)<<16, so that no bit of the low 16, where the
// dataplane's other marks live (internal marks, masquerade, drop), is
// set.
func DSRMark(i int) uint32 { return uint32(i+1) << 16 }

// dsrMarks is how many peer marks there are.
const dsrMarks = 1<<16 - 1

// assignDSRMarks gives every node (sorted by name) its peer mark, stable
// while it stays among the nodes: the mark prev gave it when that is a
// peer mark no other node kept; else the mark its name hashes to (FNV-1a),
// or the next free one after it. A node joining or leaving therefore
// renumbers no other node, and even without prev (a restarted daemon)
// most nodes get the marks they had. Marks are local to a node (its
// nftables map and IPVS services); nodes need not agree on them.
func assignDSRMarks(nodes []DSRNode, prev map[string]uint32) map[string]uint32 {
	marks := make(map[string]uint32, len(nodes))
	taken := make(map[uint32]bool, len(nodes))
	for _, n := range nodes {
		m, ok := prev[n.Name]
		if ok && m != 0 && m&0xffff == 0 && !taken[m] {
			marks[n.Name], taken[m] = m, true
		}
	}
	for _, n := range nodes {
		if _, ok := marks[n.Name]; ok {
			continue
		}
		h := fnv.New32a()
		h.Write([]byte(n.Name))
		i := int(h.Sum32() % dsrMarks)
		for taken[DSRMark(i)] {
			i = (i + 1) % dsrMarks
		}
		marks[n.Name], taken[DSRMark(i)] = DSRMark(i), true
	}
	return marks
}

// DSRNode is a node of the cluster as dsr planning needs it: its name,
// which orders the Maglev table, and the address it is reached at (IPv4;
// Addr6, IPv6, for IPv6 frontends).
type DSRNode struct {
	Name  string
	Addr  netip.Addr
	Addr6 netip.Addr
	// Mark, when set, is the node's peer mark (the daemon's DSRMarks
	// keeps them stable across all its frontends as nodes come and go);
	// left zero on every node, DSRInput.Marks and the names decide
	// (assignDSRMarks). Marks are local to this node: two nodes may
	// number their peers differently.
	Mark uint32
}

// DSRFrontendInput is one dsr frontend and its backend nodes: the nodes
// holding ready endpoints of it, weighted (by their ready endpoints, or
// 1 each).
type DSRFrontendInput struct {
	Key      model.VirtualServiceKey
	Backends []maglev.Backend
}

// DSRInput is everything DSR plans from. Every node must be given the
// same Nodes, Frontends, TableSize and Seed, or their tables differ.
type DSRInput struct {
	// Self is this node's name, one of Nodes.
	Self  string
	Nodes []DSRNode
	// TableSize is the Maglev table size, a prime fixed cluster-wide
	// (maglev.SizeFor); Seed hashes the backends' names into it and
	// seeds the per-packet flow hash.
	TableSize     uint64
	Seed          uint32
	Encapsulation model.Encapsulation
	GUEPort       uint16
	// LinkMTU, when non-zero, is the MTU of the path between nodes: the
	// plan clamps TCP's MSS to what fits it once encapsulated.
	LinkMTU   int
	Frontends []DSRFrontendInput
	// IPv6 plans the IPv6 side (this node's Addr6, MSS6) even when no
	// frontend in Frontends is IPv6: for a caller planning the frontends
	// one by one.
	IPv6 bool
	// Marks are the peer marks the previous plan gave (its
	// model.DSRPlan.Marks), nil for the first: each node keeps its mark
	// (assignDSRMarks), so that a node joining or leaving rebuilds no
	// other peer's service.
	Marks map[string]uint32
}

// DSR plans the dsr side of this node: each frontend's Maglev table over
// its backend nodes, with this node's slots as mark 0 and every other
// node's as its peer mark; the peers any table refers to; and the MSS
// clamp. It is pure: the same input gives the same plan on every node,
// apart from which slots are marked 0.
func DSR(in DSRInput) (model.DSRPlan, error) {
	switch in.Encapsulation {
	case model.IPIP:
	case model.GUE:
		if in.GUEPort == 0 {
			return model.DSRPlan{}, errors.New("dsr: gue needs a port")
		}
	default:
		return model.DSRPlan{}, fmt.Errorf("dsr: unknown encapsulation %v", in.Encapsulation)
	}
	if in.Seed == 0 {
		// nftables' jhash picks a random seed per node without one.
		return model.DSRPlan{}, errors.New("dsr: seed 0: every node needs the same non-zero seed")
	}
	nodes := slices.Clone(in.Nodes)
	slices.SortFunc(nodes, func(a, b DSRNode) int { return cmp.Compare(a.Name, b.Name) })
	addrs := make(map[string]netip.Addr, len(nodes))
	addrs6 := make(map[string]netip.Addr, len(nodes))
	if len(nodes) > dsrMarks {
		return model.DSRPlan{}, fmt.Errorf("dsr: %d nodes, at most %d", len(nodes), dsrMarks)
	}
	given := len(nodes) > 0 && nodes[0].Mark != 0
	taken := make(map[uint32]string, len(nodes))
	for i, n := range nodes {
		if i > 0 && nodes[i-1].Name == n.Name {
			return model.DSRPlan{}, fmt.Errorf("dsr: node %q given twice", n.Name)
		}
		if !n.Addr.IsValid() {
			return model.DSRPlan{}, fmt.Errorf("dsr: node %q has no address", n.Name)
		}
		if n.Addr6.IsValid() && !n.Addr6.Is6() {
			return model.DSRPlan{}, fmt.Errorf("dsr: node %q: Addr6 %s is not IPv6", n.Name, n.Addr6)
		}
		if given {
			m := n.Mark
			if m == 0 || m&0xffff != 0 {
				return model.DSRPlan{}, fmt.Errorf("dsr: node %q: mark %#x is not a dsr mark (every node needs one, or none)", n.Name, m)
			}
			if other, dup := taken[m]; dup {
				return model.DSRPlan{}, fmt.Errorf("dsr: nodes %q and %q have the same mark %#x", other, n.Name, m)
			}
			taken[m] = n.Name
		}
		addrs[n.Name] = n.Addr
		addrs6[n.Name] = n.Addr6
	}
	marks := make(map[string]uint32, len(nodes))
	if given {
		for _, n := range nodes {
			marks[n.Name] = n.Mark
		}
	} else {
		marks = assignDSRMarks(nodes, in.Marks)
	}
	if _, ok := marks[in.Self]; !ok {
		return model.DSRPlan{}, fmt.Errorf("dsr: this node %q is not among the nodes", in.Self)
	}
	if !addrs[in.Self].Is4() {
		return model.DSRPlan{}, fmt.Errorf("dsr: this node's address %s is not IPv4", addrs[in.Self])
	}
	p := model.DSRPlan{
		Addr:          addrs[in.Self],
		Encapsulation: in.Encapsulation,
		GUEPort:       in.GUEPort,
		Seed:          in.Seed,
	}
	if !given {
		p.Marks = marks
	}
	v6 := in.IPv6 || slices.ContainsFunc(in.Frontends, func(f DSRFrontendInput) bool { return f.Key.Addr.Is6() })
	if v6 {
		// ipip: ip6ip6; GUE: GUE over IPv6 (a FOU port of each family).
		if !addrs6[in.Self].IsValid() {
			return model.DSRPlan{}, fmt.Errorf("dsr: IPv6 frontends, and this node %q has no IPv6 address", in.Self)
		}
		p.Addr6 = addrs6[in.Self]
	}
	if in.Encapsulation == model.IPIP {
		p.GUEPort = 0
	}
	if in.LinkMTU > 0 {
		// IPv4 and TCP headers without options: 40 bytes.
		mss := in.LinkMTU - in.Encapsulation.Overhead() - 40
		if mss < 536 {
			return model.DSRPlan{}, fmt.Errorf("dsr: link MTU %d leaves an MSS of %d", in.LinkMTU, mss)
		}
		p.MSS = uint16(mss)
		if v6 {
			// IPv6 and TCP headers without options: 60 bytes.
			p.MSS6 = uint16(in.LinkMTU - in.Encapsulation.Overhead6() - 60)
		}
	}
	var seed [4]byte
	binary.BigEndian.PutUint32(seed[:], in.Seed)
	peers := map[string]bool{}
	for _, f := range in.Frontends {
		for _, b := range f.Backends {
			if _, ok := marks[b.Name]; !ok {
				return model.DSRPlan{}, fmt.Errorf("dsr: frontend %v: backend node %q is not among the nodes", f.Key, b.Name)
			}
			if f.Key.Addr.Is6() && !addrs6[b.Name].IsValid() {
				return model.DSRPlan{}, fmt.Errorf("dsr: IPv6 frontend %v: backend node %q has no IPv6 address", f.Key, b.Name)
			}
		}
		t, err := maglev.New(f.Backends, in.TableSize, seed[:])
		if err != nil {
			return model.DSRPlan{}, fmt.Errorf("dsr: frontend %v: %w", f.Key, err)
		}
		fp := model.DSRFrontend{VirtualServiceKey: f.Key}
		if len(t.Shares()) > 0 {
			fp.Slots = make([]uint32, t.Size())
			for i := range fp.Slots {
				owner := t.At(uint64(i))
				if owner == in.Self {
					continue
				}
				fp.Slots[i] = marks[owner]
				peers[owner] = true
			}
		}
		p.Frontends = append(p.Frontends, fp)
	}
	slices.SortFunc(p.Frontends, func(a, b model.DSRFrontend) int { return a.Compare(b.VirtualServiceKey) })
	for i := 1; i < len(p.Frontends); i++ {
		if p.Frontends[i-1].VirtualServiceKey == p.Frontends[i].VirtualServiceKey {
			return model.DSRPlan{}, fmt.Errorf("dsr: frontend %v given twice", p.Frontends[i].VirtualServiceKey)
		}
	}
	for _, n := range nodes {
		if peers[n.Name] {
			if !n.Addr.Is4() {
				return model.DSRPlan{}, fmt.Errorf("dsr: node %q: address %s is not IPv4", n.Name, n.Addr)
			}
			peer := model.DSRPeer{Name: n.Name, Addr: n.Addr, Mark: marks[n.Name]}
			if v6 {
				peer.Addr6 = n.Addr6
			}
			p.Peers = append(p.Peers, peer)
		}
	}
	return p, nil
}
