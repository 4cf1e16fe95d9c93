package plan_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/maglev"
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plan"
)

var (
	dsrVIP   = model.VirtualServiceKey{Addr: netip.MustParseAddr("192.0.2.10"), Port: 80, Protocol: model.TCP}
	dsrNodes = []plan.DSRNode{
		{Name: "n3", Addr: netip.MustParseAddr("10.0.3.2")},
		{Name: "n1", Addr: netip.MustParseAddr("10.0.1.2")},
		{Name: "n2", Addr: netip.MustParseAddr("10.0.2.2")},
	}
)

func dsrInput(self string, nodes []plan.DSRNode, backends ...string) plan.DSRInput {
	in := plan.DSRInput{
		Self:          self,
		Nodes:         nodes,
		TableSize:     307,
		Seed:          0x5eed,
		Encapsulation: model.IPIP,
		LinkMTU:       1500,
	}
	var bs []maglev.Backend
	for _, b := range backends {
		bs = append(bs, maglev.Backend{Name: b, Weight: 1})
	}
	in.Frontends = []plan.DSRFrontendInput{{Key: dsrVIP, Backends: bs}}
	return in
}

// owners resolves a node's table to node names: what every node must
// agree on.
func owners(t *testing.T, self string, p model.DSRPlan) []string {
	t.Helper()
	names := map[uint32]string{0: self}
	for _, peer := range p.Peers {
		names[peer.Mark] = peer.Name
	}
	var out []string
	for _, m := range p.Frontends[0].Slots {
		name, ok := names[m]
		if !ok {
			t.Fatalf("%s: slot mark %#x names no peer", self, m)
		}
		out = append(out, name)
	}
	return out
}

func TestDSRTablesAgreeAcrossNodes(t *testing.T) {
	var want []string
	for _, self := range []string{"n1", "n2", "n3"} {
		p, err := plan.DSR(dsrInput(self, dsrNodes, "n1", "n2"))
		if err != nil {
			t.Fatal(err)
		}
		got := owners(t, self, p)
		if want == nil {
			want = got
			continue
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%s's table differs from n1's (-n1 +%s):\n%s", self, self, d)
		}
	}
	shares := map[string]int{}
	for _, o := range want {
		shares[o]++
	}
	if len(shares) != 2 || shares["n1"] < 140 || shares["n2"] < 140 {
		t.Errorf("shares %v, want about half of 307 each to n1 and n2", shares)
	}
}

// A node that serves none of the frontend joining or leaving the cluster
// moves no slot.
func TestDSRNonBackendNodeMovesNothing(t *testing.T) {
	before, err := plan.DSR(dsrInput("n2", dsrNodes[1:], "n1"))
	if err != nil {
		t.Fatal(err)
	}
	after, err := plan.DSR(dsrInput("n2", append(dsrNodes[1:], plan.DSRNode{Name: "n0", Addr: netip.MustParseAddr("10.0.9.2")}), "n1"))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(owners(t, "n2", before), owners(t, "n2", after)); d != "" {
		t.Errorf("slots moved (-before +after):\n%s", d)
	}
}

func TestDSRPlan(t *testing.T) {
	for _, tc := range []struct {
		name     string
		in       plan.DSRInput
		peers    []model.DSRPeer
		mss      uint16
		selfOnly bool // every slot 0
	}{
		{
			name:  "ingress only: every slot to the one backend node",
			in:    dsrInput("n2", dsrNodes, "n1"),
			peers: []model.DSRPeer{{Name: "n1", Addr: netip.MustParseAddr("10.0.1.2")}},
			mss:   1440,
		},
		{
			name:     "the only backend node: no peer, every slot its own",
			in:       dsrInput("n1", dsrNodes, "n1"),
			mss:      1440,
			selfOnly: true,
		},
		{
			name: "gue costs 12 more bytes",
			in: func() plan.DSRInput {
				in := dsrInput("n1", dsrNodes, "n1", "n3")
				in.Encapsulation, in.GUEPort = model.GUE, 6080
				return in
			}(),
			peers: []model.DSRPeer{{Name: "n3", Addr: netip.MustParseAddr("10.0.3.2")}},
			mss:   1428,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := plan.DSR(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			for i := range tc.peers {
				tc.peers[i].Mark = p.Marks[tc.peers[i].Name] // TestDSRMarksStable checks them
			}
			if d := cmp.Diff(tc.peers, p.Peers, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); d != "" {
				t.Errorf("peers (-want +got):\n%s", d)
			}
			if p.MSS != tc.mss {
				t.Errorf("MSS %d, want %d", p.MSS, tc.mss)
			}
			zero := 0
			for _, m := range p.Frontends[0].Slots {
				if m == 0 {
					zero++
				}
			}
			if tc.selfOnly != (zero == len(p.Frontends[0].Slots)) {
				t.Errorf("%d of %d slots served here, want all: %t", zero, len(p.Frontends[0].Slots), tc.selfOnly)
			}
		})
	}
}

// TestDSRMarksStable: every node gets a distinct peer mark, and a node
// keeps its mark whatever joins or leaves, given the previous plan's
// marks; without them (a restarted daemon) the marks hashed from the
// names come back alike.
func TestDSRMarksStable(t *testing.T) {
	n0 := plan.DSRNode{Name: "n0", Addr: netip.MustParseAddr("10.0.9.2")}
	first, err := plan.DSR(dsrInput("n1", dsrNodes, "n1", "n2", "n3"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[uint32]string{}
	for name, m := range first.Marks {
		if m == 0 || m&0xffff != 0 {
			t.Errorf("%s: mark %#x is not a peer mark", name, m)
		}
		if other, dup := seen[m]; dup {
			t.Errorf("%s and %s share mark %#x", name, other, m)
		}
		seen[m] = name
	}
	for _, tc := range []struct {
		name  string
		nodes []plan.DSRNode
		prev  map[string]uint32
	}{
		{"n0 joins (sorted first)", append([]plan.DSRNode{n0}, dsrNodes...), first.Marks},
		{"n2 leaves", []plan.DSRNode{dsrNodes[0], dsrNodes[1]}, first.Marks},
		{"n0 joins, no previous plan", append([]plan.DSRNode{n0}, dsrNodes...), nil},
		{"previous marks collide: each keeps one, the first by name wins", dsrNodes, map[string]uint32{"n1": plan.DSRMark(4), "n2": plan.DSRMark(4), "n3": first.Marks["n3"]}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := dsrInput("n1", tc.nodes, "n1")
			in.Marks = tc.prev
			p, err := plan.DSR(in)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]uint32{}
			for _, n := range tc.nodes {
				if m, ok := tc.prev[n.Name]; ok {
					want[n.Name] = m
				} else if m, ok := first.Marks[n.Name]; ok {
					want[n.Name] = m
				} else {
					want[n.Name] = p.Marks[n.Name] // new: any free mark
				}
			}
			if tc.prev["n2"] == tc.prev["n1"] && tc.prev["n1"] != 0 {
				want["n2"] = first.Marks["n2"] // lost the collision: its hashed mark
			}
			if d := cmp.Diff(want, p.Marks); d != "" {
				t.Errorf("marks (-want +got):\n%s", d)
			}
			if n, ok := p.Marks["n0"]; ok && (n == 0 || slices.Contains([]uint32{p.Marks["n1"], p.Marks["n2"], p.Marks["n3"]}, n)) {
				t.Errorf("n0's mark %#x is 0 or another node's", n)
			}
		})
	}
}

// TestDSRIPv6Frontend: an IPv6 frontend's peers carry their IPv6
// addresses, the plan this node's, and MSS6 leaves room for an IPv6
// header over IPv6 and TCP's.
func TestDSRIPv6Frontend(t *testing.T) {
	var nodes []plan.DSRNode
	for i, n := range dsrNodes {
		n.Addr6 = netip.AddrFrom16([16]byte{0: 0xfd, 15: byte(i + 1)})
		nodes = append(nodes, n)
	}
	for _, enc := range []model.Encapsulation{model.IPIP, model.GUE} {
		t.Run(enc.String(), func(t *testing.T) {
			in := dsrInput("n2", nodes, "n1")
			in.Frontends[0].Key.Addr = netip.MustParseAddr("2001:db8::10")
			in.Encapsulation, in.GUEPort = enc, 6080
			p, err := plan.DSR(in)
			if err != nil {
				t.Fatal(err)
			}
			want := []model.DSRPeer{{Name: "n1", Addr: nodes[1].Addr, Addr6: nodes[1].Addr6, Mark: p.Marks["n1"]}}
			if d := cmp.Diff(want, p.Peers, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); d != "" {
				t.Errorf("peers (-want +got):\n%s", d)
			}
			// ip6ip6 adds 40 bytes, GUE over IPv6 52; IPv6 and TCP 60.
			if mss := 1500 - enc.Overhead6() - 60; p.Addr6 != nodes[2].Addr6 || int(p.MSS6) != mss {
				t.Errorf("Addr6 %s MSS6 %d, want %s and %d", p.Addr6, p.MSS6, nodes[2].Addr6, mss)
			}
		})
	}
}

func TestDSRNoBackendNoTable(t *testing.T) {
	p, err := plan.DSR(dsrInput("n1", dsrNodes))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Frontends) != 1 || p.Frontends[0].Slots != nil || p.Peers != nil {
		t.Errorf("plan %+v, want the frontend without a table and no peer", p)
	}
}

func TestDSRRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*plan.DSRInput)
		want string
	}{
		{"unknown self", func(in *plan.DSRInput) { in.Self = "n9" }, `this node "n9"`},
		{"backend not a node", func(in *plan.DSRInput) { in.Frontends[0].Backends[0].Name = "n9" }, `backend node "n9"`},
		{"gue without port", func(in *plan.DSRInput) { in.Encapsulation = model.GUE }, "gue needs a port"},
		{"no encapsulation", func(in *plan.DSRInput) { in.Encapsulation = 0 }, "unknown encapsulation"},
		{"IPv6 frontend, nodes without IPv6", func(in *plan.DSRInput) { in.Frontends[0].Key.Addr = netip.MustParseAddr("2001:db8::1") }, "no IPv6 address"},
		{"IPv6 frontend, a backend without IPv6", func(in *plan.DSRInput) {
			in.Frontends[0].Key.Addr = netip.MustParseAddr("2001:db8::1")
			in.Nodes = []plan.DSRNode{{Name: "n1", Addr: netip.MustParseAddr("10.0.1.2"), Addr6: netip.MustParseAddr("fd00::1")}, {Name: "n2", Addr: netip.MustParseAddr("10.0.2.2")}}
		}, `backend node "n2" has no IPv6`},
		{"Addr6 not IPv6", func(in *plan.DSRInput) {
			in.Nodes = slices.Clone(in.Nodes)
			in.Nodes[0].Addr6 = netip.MustParseAddr("10.9.9.9")
		}, "not IPv6"},
		{"table size not prime", func(in *plan.DSRInput) { in.TableSize = 300 }, "want a prime"},
		{"seed 0", func(in *plan.DSRInput) { in.Seed = 0 }, "seed 0"},
		{"tiny MTU", func(in *plan.DSRInput) { in.LinkMTU = 576 }, "MSS"},
		{"IPv6 node", func(in *plan.DSRInput) {
			in.Nodes = []plan.DSRNode{{Name: "n1", Addr: netip.MustParseAddr("fd00::1")}, {Name: "n2", Addr: netip.MustParseAddr("10.0.2.2")}}
		}, "not IPv4"},
		{"node twice", func(in *plan.DSRInput) { in.Nodes = append(in.Nodes, in.Nodes[0]) }, "given twice"},
		{"node without address", func(in *plan.DSRInput) { in.Nodes = append(in.Nodes, plan.DSRNode{Name: "n4"}) }, "no address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := dsrInput("n1", dsrNodes, "n1", "n2")
			tc.edit(&in)
			_, err := plan.DSR(in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}
