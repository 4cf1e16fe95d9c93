// Package reporttest holds a goroutine-safe report.Recorder that keeps
// the Events it is given.
package reporttest

import (
	"slices"
	"sync"

	"github.com/switchyard-lb/switchyard/core/model"
)

// Event is one recorded Event.
type Event struct {
	Service model.ServiceKey
	Reason  string
	Message string
}

// Recorder records Events; its zero value is ready.
type Recorder struct {
	mu     sync.Mutex
	events []Event
}

// Event records an Event.
func (r *Recorder) Event(svc model.ServiceKey, reason, message string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, Event{svc, reason, message})
}

// Take returns the Events recorded since the last Take.
func (r *Recorder) Take() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Clone(r.events)
	r.events = nil
	return out
}
