package plugintest

import (
	"slices"

	"github.com/switchyard-lb/switchyard/core/plugin"
)

// Schedulers is a fixed plugin.SchedulerSet, for a dataplane that
// supports fewer schedulers than IPVS. It is immutable, so goroutine-safe.
type Schedulers struct {
	names    []string
	weighted map[string]string
}

var _ plugin.SchedulerSet = (*Schedulers)(nil)

// NewSchedulers returns the set of names, none of which ignores weights
// until WithWeighted says so.
func NewSchedulers(names ...string) *Schedulers {
	return &Schedulers{names: slices.Clone(names), weighted: map[string]string{}}
}

// WithWeighted returns a copy of s whose WeightedScheduler answers to for
// from.
func (s *Schedulers) WithWeighted(from, to string) *Schedulers {
	c := &Schedulers{names: s.names, weighted: map[string]string{from: to}}
	for k, v := range s.weighted {
		if k != from {
			c.weighted[k] = v
		}
	}
	return c
}

// SupportsScheduler reports whether name is one of the set's names.
func (s *Schedulers) SupportsScheduler(name string) bool { return slices.Contains(s.names, name) }

// Schedulers returns the set's names, in NewSchedulers' order.
func (s *Schedulers) Schedulers() []string { return slices.Clone(s.names) }

// WeightedScheduler returns what WithWeighted set for name, else name.
func (s *Schedulers) WeightedScheduler(name string) string {
	if to, ok := s.weighted[name]; ok {
		return to
	}
	return name
}
