package reconcile

import (
	"cmp"
	"maps"
	"net/netip"
	"slices"

	"github.com/switchyard-lb/switchyard/core/election"
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
)

// This file keeps the Elected announcers' elections between Syncs, so
// that a Sync's election work grows with the addresses it changed, not
// with the cluster.
//
// An announcement's election reads only its address's Services (their
// plans' addresses and electionInfo), the nodes, gossip's view of them,
// and the announcer's pools and node selector. So each Sync elects again
// only the addresses of the Services it took a change of (their old and
// new addresses, with every Service sharing one), and everything when the
// nodes (their names, readiness or labels), gossip's answers, the
// options or an announcer's Version changed, and on a full resync.

// announceIndex is the desired announcements: each Service's addresses
// (its plan's Announce) and each address's Services, sorted, with the
// addresses whose Services or election inputs changed since the
// elections last took them.
type announceIndex struct {
	byService map[model.ServiceKey][]netip.Addr
	byAddr    map[netip.Addr][]model.ServiceKey
	dirty     map[netip.Addr]struct{}
}

func newAnnounceIndex() announceIndex {
	return announceIndex{
		byService: make(map[model.ServiceKey][]netip.Addr),
		byAddr:    make(map[netip.Addr][]model.ServiceKey),
		dirty:     make(map[netip.Addr]struct{}),
	}
}

// reset forgets everything (a full sync sets every Service again).
func (x *announceIndex) reset() {
	clear(x.byService)
	clear(x.byAddr)
	clear(x.dirty)
}

// set records that k announces addrs (sorted; none when the Service is
// gone) and marks its old and new addresses dirty.
func (x *announceIndex) set(k model.ServiceKey, addrs []netip.Addr) {
	old := x.byService[k]
	if slices.Equal(old, addrs) {
		x.touch(k)
		return
	}
	for _, a := range old {
		x.dirty[a] = struct{}{}
		s := x.byAddr[a]
		if i, ok := slices.BinarySearchFunc(s, k, model.ServiceKey.Compare); ok {
			s = slices.Delete(s, i, i+1)
		}
		if len(s) == 0 {
			delete(x.byAddr, a)
		} else {
			x.byAddr[a] = s
		}
	}
	if len(addrs) == 0 {
		delete(x.byService, k)
		return
	}
	x.byService[k] = addrs
	for _, a := range addrs {
		x.dirty[a] = struct{}{}
		s := x.byAddr[a]
		if i, ok := slices.BinarySearchFunc(s, k, model.ServiceKey.Compare); !ok {
			s = slices.Insert(s, i, k)
		}
		x.byAddr[a] = s
	}
}

// touch marks k's addresses dirty: its election inputs changed.
func (x *announceIndex) touch(k model.ServiceKey) {
	for _, a := range x.byService[k] {
		x.dirty[a] = struct{}{}
	}
}

// takeDirty returns the dirty addresses, sorted (none when all: every
// address is elected again), and clears them.
func (x *announceIndex) takeDirty(all bool) []netip.Addr {
	if len(x.dirty) == 0 {
		return nil
	}
	var out []netip.Addr
	if !all {
		out = slices.SortedFunc(maps.Keys(x.dirty), netip.Addr.Compare)
	}
	// A new map, not a cleared one: a cleared map keeps its size, and
	// walking it after a full sync's 10,000 addresses costs as much as
	// before.
	x.dirty = make(map[netip.Addr]struct{})
	return out
}

// at returns the announcements of the addresses addrs (sorted), sorted
// by address then Service.
func (x *announceIndex) at(addrs []netip.Addr) []model.Announcement {
	var out []model.Announcement
	for _, a := range addrs {
		for _, k := range x.byAddr[a] {
			out = append(out, model.Announcement{Addr: a, Service: k})
		}
	}
	return out
}

// all returns every announcement, sorted by address then Service.
func (x *announceIndex) all() []model.Announcement {
	return x.at(slices.SortedFunc(maps.Keys(x.byAddr), netip.Addr.Compare))
}

// electCache is one announcer's election as the last Sync left it, and
// what that Sync changed of it, for the withdrawals and announcements
// that follow.
type electCache struct {
	// out is the election, sorted by address then Service; replaced,
	// never modified, so that a slice that is out is equal to it.
	out   []model.Announcement
	valid bool
	// version is the announcer's Version that out was elected with.
	version uint64
	// prev is out before this Sync, while prevKnown (unset after a
	// whole election); gone are prev's announcements (by address and
	// Service) that out lacks, sorted.
	prev      []model.Announcement
	prevKnown bool
	gone      []model.Announcement
}

// electArgs are the inputs every announcer's election reads in one Sync.
type electArgs struct {
	self  string
	nodes map[string]*model.Node
	infos map[model.ServiceKey]electionInfo
	alive election.AliveFunc
	index *announceIndex
	// dirty are the addresses to elect again (sorted); all set: every
	// address.
	dirty []netip.Addr
	all   bool
}

// update elects ea's announcements again where args says something
// changed, and returns the election (read-only).
func (c *electCache) update(ea *plugin.ElectedAnnouncer, args *electArgs) []model.Announcement {
	var version uint64
	if ea.Version != nil {
		version = ea.Version() // before electing: a later change shows next time
	}
	c.prev, c.prevKnown, c.gone = c.out, c.valid, nil
	if args.all || !c.valid || version != c.version {
		c.out = elect(ea, args.self, args.nodes, args.infos, args.alive, args.index.all())
		c.valid, c.version, c.prevKnown = true, version, false
		return c.out
	}
	if len(args.dirty) == 0 {
		return c.out
	}
	again := elect(ea, args.self, args.nodes, args.infos, args.alive, args.index.at(args.dirty))
	changed := false
	rest := again
	for _, addr := range args.dirty {
		old := group(c.out, addr)
		n := 0
		for n < len(rest) && rest[n].Addr == addr {
			n++
		}
		if !slices.EqualFunc(old, rest[:n], model.Announcement.Equal) {
			changed = true
			c.gone = appendMissing(c.gone, old, rest[:n])
		}
		rest = rest[n:]
	}
	if changed {
		c.out = replaceAddrs(c.out, args.dirty, again)
	}
	return c.out
}

// withdrawn returns sent without the announcements (by address and
// Service) the election lacks, and whether there were any.
func (c *electCache) withdrawn(sent []model.Announcement) ([]model.Announcement, bool) {
	switch {
	case same(sent, c.out):
		return nil, false
	case c.prevKnown && same(sent, c.prev):
		if len(c.gone) == 0 {
			return nil, false
		}
		return without(sent, c.gone), true
	}
	return withdrawn(sent, c.out)
}

// holds reports whether sent equals the election.
func (c *electCache) holds(sent []model.Announcement) bool {
	switch {
	case same(sent, c.out):
		return true
	case c.prevKnown && same(sent, c.prev):
		return false // out would be prev if the election had not changed
	}
	return slices.EqualFunc(sent, c.out, model.Announcement.Equal)
}

// same reports whether a and b are the same slice (hence equal: the
// elections are never modified).
func same(a, b []model.Announcement) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// group returns the announcements of addr in set (sorted by address).
func group(set []model.Announcement, addr netip.Addr) []model.Announcement {
	lo, _ := slices.BinarySearchFunc(set, addr, func(a model.Announcement, addr netip.Addr) int { return a.Addr.Compare(addr) })
	hi := lo
	for hi < len(set) && set[hi].Addr == addr {
		hi++
	}
	return set[lo:hi]
}

// appendMissing appends to gone old's announcements (one address's,
// sorted by Service) that now lacks.
func appendMissing(gone, old, now []model.Announcement) []model.Announcement {
	for _, x := range old {
		if !slices.ContainsFunc(now, func(y model.Announcement) bool { return y.Service == x.Service }) {
			gone = append(gone, x)
		}
	}
	return gone
}

// replaceAddrs returns a new list: set without its announcements of the
// addresses addrs (sorted), merged with again (their new ones, sorted).
func replaceAddrs(set []model.Announcement, addrs []netip.Addr, again []model.Announcement) []model.Announcement {
	out := make([]model.Announcement, 0, len(set)+len(again))
	for _, x := range set {
		for len(addrs) > 0 && addrs[0].Less(x.Addr) {
			addrs = addrs[1:]
		}
		if len(addrs) > 0 && addrs[0] == x.Addr {
			continue
		}
		for len(again) > 0 && compareAnnouncements(again[0], x) < 0 {
			out, again = append(out, again[0]), again[1:]
		}
		out = append(out, x)
	}
	return append(out, again...)
}

// without returns sent without the announcements (by address and
// Service) of gone; both are sorted.
func without(sent, gone []model.Announcement) []model.Announcement {
	keep := make([]model.Announcement, 0, len(sent))
	for _, x := range sent {
		for len(gone) > 0 && compareAnnouncements(gone[0], x) < 0 {
			gone = gone[1:]
		}
		if len(gone) > 0 && compareAnnouncements(gone[0], x) == 0 {
			continue
		}
		keep = append(keep, x)
	}
	return keep
}

// withdrawn returns sent without the announcements (by address and
// Service) that want lacks, and whether there were any; both are sorted.
// One pass over both, allocating only when something is withdrawn.
func withdrawn(sent, want []model.Announcement) ([]model.Announcement, bool) {
	var keep []model.Announcement
	gone := false
	j := 0
	for i, x := range sent {
		for j < len(want) && compareAnnouncements(want[j], x) < 0 {
			j++
		}
		if j < len(want) && compareAnnouncements(want[j], x) == 0 {
			if gone {
				keep = append(keep, x)
			}
			continue
		}
		if !gone {
			gone = true
			keep = append(make([]model.Announcement, 0, len(sent)), sent[:i]...)
		}
	}
	return keep, gone
}

func compareAnnouncements(a, b model.Announcement) int {
	return cmp.Or(a.Addr.Compare(b.Addr), a.Service.Compare(b.Service))
}

func countAddrs(set []model.Announcement) int {
	n := 0
	for i, a := range set {
		if i == 0 || a.Addr != set[i-1].Addr {
			n++
		}
	}
	return n
}

// aliveAnswer is one answer of gossip membership (election.AliveFunc).
type aliveAnswer struct{ alive, known bool }

// aliveView asks alive once about each node and returns those answers
// as the AliveFunc of this Sync's elections, and whether they differ
// from last's (seen, which it updates). Nil alive: nil, false.
func aliveView(alive election.AliveFunc, nodes map[string]*model.Node, seen map[string]aliveAnswer) (election.AliveFunc, bool) {
	if alive == nil {
		return nil, false
	}
	changed := len(seen) != len(nodes)
	view := make(map[string]aliveAnswer, len(nodes))
	for name := range nodes {
		var a aliveAnswer
		a.alive, a.known = alive(name)
		view[name] = a
		if old, ok := seen[name]; !ok || old != a {
			changed = true
		}
	}
	clear(seen)
	maps.Copy(seen, view)
	return func(node string) (bool, bool) {
		if a, ok := view[node]; ok {
			return a.alive, a.known
		}
		return alive(node)
	}, changed
}

// electsAlike reports whether two states of a node (nil: unknown) elect
// alike: the election reads only their readiness and labels.
func electsAlike(a, b *model.Node) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Ready == b.Ready && maps.Equal(a.Labels, b.Labels)
}
