package lb

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/switchyard-lb/switchyard/core/config"
	"github.com/switchyard-lb/switchyard/core/ipam"
)

// announcerSlot holds what a config reload may change of a running
// announcer without a restart: the pools it serves and its node
// selector. The election reads them through Serves and Matches from the
// loop's goroutine while a reload writes them.
type announcerSlot struct {
	name string

	mu  sync.Mutex // serialises writers; guards cfg
	cfg config.Announcer
	// ranges are the addresses of the pools it serves; nil: every
	// address (no pools listed).
	ranges   atomic.Pointer[[]ipam.Range]
	selector atomic.Pointer[labels.Selector]
	// version counts the changes of ranges and selector
	// (plugin.ElectedAnnouncer.Version): the loop elects everything
	// again when it moves.
	version atomic.Uint64
}

func newAnnouncerSlot(ac config.Announcer, pools []ipam.Pool) *announcerSlot {
	s := &announcerSlot{name: ac.Name, cfg: ac}
	s.setSelector(ac.NodeSelector)
	s.setPools(pools)
	return s
}

// serves reports whether the announcer is responsible for a
// (plugin.ElectedAnnouncer.Serves).
func (s *announcerSlot) serves(a netip.Addr) bool {
	r := s.ranges.Load()
	return r == nil || slices.ContainsFunc(*r, func(r ipam.Range) bool { return r.Contains(a) })
}

// Matches reports whether a node with labels l may announce
// (election.Matcher).
func (s *announcerSlot) Matches(l map[string]string) bool {
	return (*s.selector.Load()).Matches(labels.Set(l))
}

func (s *announcerSlot) setSelector(set map[string]string) {
	sel := labels.SelectorFromSet(set) // empty: every node
	s.selector.Store(&sel)
	s.version.Add(1)
}

// setPools takes the current pools' addresses for the pools the
// announcer lists.
func (s *announcerSlot) setPools(pools []ipam.Pool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setPoolsLocked(pools)
}

func (s *announcerSlot) setPoolsLocked(pools []ipam.Pool) {
	defer s.version.Add(1) // after the store: a Sync reading the old version elects again
	if len(s.cfg.Pools) == 0 {
		s.ranges.Store(nil)
		return
	}
	ranges := []ipam.Range{}
	for _, p := range pools {
		if !slices.Contains(s.cfg.Pools, p.Name) {
			continue
		}
		for _, a := range p.Addresses {
			if r, err := ipam.ParseRange(a); err == nil { // validated with the config
				ranges = append(ranges, r)
			}
		}
	}
	s.ranges.Store(&ranges)
}

// reloadable reports why next cannot be applied to the running
// announcer: anything but its pools and node selector changed.
func (s *announcerSlot) reloadable(next config.Announcer) error {
	s.mu.Lock()
	cur := s.cfg
	s.mu.Unlock()
	cur.Pools, cur.NodeSelector = next.Pools, next.NodeSelector
	if !reflect.DeepEqual(cur, next) {
		return fmt.Errorf("announcer %s: settings beyond pools and nodeSelector changed", s.name)
	}
	return nil
}

// apply takes next's pools and node selector.
func (s *announcerSlot) apply(next config.Announcer, pools []ipam.Pool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cfg = next
	s.setSelector(next.NodeSelector)
	s.setPoolsLocked(pools)
}
