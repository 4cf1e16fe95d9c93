package plugintest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
)

// ErrUnknownPolicy is what Policies.Resolve returns for a name never Set.
var ErrUnknownPolicy = errors.New("unknown policy")

var (
	_ plugin.Source         = (*Source)(nil)
	_ plugin.Policies       = (*Policies)(nil)
	_ plugin.Policy         = (*Func)(nil)
	_ plugin.PolicyReporter = (*Reporter)(nil)
)

// Policies is a goroutine-safe fake of plugin.Policies: a table of
// named policies that tests Set, with a default for Services without a
// policy annotation.
type Policies struct {
	mu       sync.Mutex
	def      string
	synced   bool
	policies map[string]policyEntry
	changed  map[string]bool
}

type policyEntry struct {
	p      plugin.Policy
	params []byte
	err    error
}

// NewPolicies returns a synced, empty table whose default is def.
func NewPolicies(def string) *Policies {
	return &Policies{def: def, synced: true, policies: map[string]policyEntry{}, changed: map[string]bool{}}
}

// Set makes name resolve to p with params and err (p nil with err: the
// policy cannot be used; p with err: an earlier version of it stands in),
// and marks name changed.
func (f *Policies) Set(name string, p plugin.Policy, params []byte, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.policies[name] = policyEntry{p, params, err}
	f.changed[name] = true
}

// SetSynced sets what HasSynced reports.
func (f *Policies) SetSynced(synced bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.synced = synced
}

// HasSynced reports what SetSynced set (true at first).
func (f *Policies) HasSynced() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.synced
}

// Resolve looks up svc.Policy, else the default. A name never Set is
// still loading (plugin.ErrPolicyLoading) while HasSynced is false, as in
// plugins/registry, and unknown after.
func (f *Policies) Resolve(svc *model.Service) (string, plugin.Policy, []byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	name := svc.Policy
	if name == "" {
		name = f.def
	}
	e, ok := f.policies[name]
	switch {
	case !ok && !f.synced:
		return name, nil, nil, fmt.Errorf("policy %q: %w", name, plugin.ErrPolicyLoading)
	case !ok:
		return name, nil, nil, fmt.Errorf("%w %q", ErrUnknownPolicy, name)
	}
	return name, e.p, e.params, e.err
}

// Changed returns the names Set since the previous call, sorted.
func (f *Policies) Changed() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := slices.Sorted(maps.Keys(f.changed))
	clear(f.changed)
	return out
}

// Func is a plugin.Policy calling a function and counting its calls.
type Func struct {
	name string
	fn   func(ctx context.Context, in *plugin.PolicyInput) (plugin.PolicyResult, error)

	mu    sync.Mutex
	calls int
}

// NewFunc returns a policy named name that runs fn.
func NewFunc(name string, fn func(ctx context.Context, in *plugin.PolicyInput) (plugin.PolicyResult, error)) *Func {
	return &Func{name: name, fn: fn}
}

// Name returns the policy's name.
func (f *Func) Name() string { return f.name }

// Evaluate counts the call and runs the function.
func (f *Func) Evaluate(ctx context.Context, in *plugin.PolicyInput) (plugin.PolicyResult, error) {
	f.mu.Lock()
	f.calls++
	f.mu.Unlock()
	return f.fn(ctx, in)
}

// Calls returns how many times Evaluate ran.
func (f *Func) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// Event is an Event a Reporter recorded.
type Event struct {
	Service model.ServiceKey
	Reason  string
	Message string
}

// Condition is a PolicyReady condition a Reporter recorded.
type Condition struct {
	Ready   bool
	Reason  string
	Message string
}

// Reporter is a goroutine-safe fake plugin.PolicyReporter that records
// what it is told.
type Reporter struct {
	mu         sync.Mutex
	events     []Event
	conditions map[model.ServiceKey]Condition
	updates    int
}

// NewReporter returns an empty Reporter.
func NewReporter() *Reporter {
	return &Reporter{conditions: map[model.ServiceKey]Condition{}}
}

// PolicyEvent records an Event.
func (r *Reporter) PolicyEvent(svc model.ServiceKey, reason, message string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, Event{svc, reason, message})
}

// PolicyCondition records the Service's condition; a ready condition
// without reason (the Service is gone) removes it.
func (r *Reporter) PolicyCondition(svc model.ServiceKey, ready bool, reason, message string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.updates++
	if ready && reason == "" {
		delete(r.conditions, svc)
		return
	}
	r.conditions[svc] = Condition{ready, reason, message}
}

// TakeEvents returns the Events recorded since the previous call.
func (r *Reporter) TakeEvents() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.events
	r.events = nil
	return out
}

// Conditions returns the current condition of each Service.
func (r *Reporter) Conditions() map[model.ServiceKey]Condition {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.conditions)
}

// Updates counts PolicyCondition calls.
func (r *Reporter) Updates() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.updates
}
