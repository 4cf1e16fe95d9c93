package plugintest

import (
	"maps"
	"slices"
	"sync"

	"github.com/switchyard-lb/switchyard/core/model"
)

// Source is a goroutine-safe fake of the watch layer: tests Push deltas and
// the loop Takes them merged, the later state of a key winning, as the real
// Source's change tracking does.
type Source struct {
	mu      sync.Mutex
	synced  bool
	pending model.Delta
	takes   int
}

// NewSource returns a Source that has not synced yet.
func NewSource() *Source { return &Source{} }

// SetSynced sets what HasSynced reports.
func (s *Source) SetSynced(synced bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.synced = synced
}

// HasSynced reports what SetSynced set.
func (s *Source) HasSynced() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.synced
}

// Push queues d for the next Take.
func (s *Source) Push(d model.Delta) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending.Services == nil {
		s.pending.Services = make(map[model.ServiceKey]model.ServiceState)
	}
	if s.pending.Nodes == nil {
		s.pending.Nodes = make(map[string]*model.Node)
	}
	maps.Copy(s.pending.Services, d.Services)
	maps.Copy(s.pending.Nodes, d.Nodes)
	s.pending.TriggerTimes = append(s.pending.TriggerTimes, d.TriggerTimes...)
}

// Take returns what was pushed since the last Take.
func (s *Source) Take() model.Delta {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.takes++
	d := s.pending
	s.pending = model.Delta{}
	d.TriggerTimes = slices.Clip(d.TriggerTimes)
	return d
}

// Takes returns how often Take was called.
func (s *Source) Takes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.takes
}
