package k8s

import (
	"maps"
	"reflect"
	"slices"
	"time"

	"github.com/switchyard-lb/switchyard/core/model"
)

// tracker holds the current state of every Service (with the endpoints of
// each of its EndpointSlices) and every Node, and what take last handed
// out for each, in the spirit of kube-proxy's service and endpoints change
// trackers. It speaks model types only and is not goroutine-safe: Source
// guards it with its mutex.
type tracker struct {
	// since is when tracking started: trigger times before it describe
	// changes made before we watched, and are not reported.
	since time.Time

	services      map[model.ServiceKey]*serviceEntry
	nodes         map[string]*nodeEntry
	dirtyServices map[model.ServiceKey]struct{}
	dirtyNodes    map[string]struct{}
}

type serviceEntry struct {
	service *model.Service
	// slices holds the converted endpoints of each EndpointSlice, by
	// slice name; endpoints is their merge.
	slices    map[string][]model.Endpoint
	endpoints []model.Endpoint
	// taken is what take last handed out (zero: nothing, or a deletion).
	taken model.ServiceState
	// triggers are the trigger times of slice events since the last take.
	triggers []time.Time
}

type nodeEntry struct {
	current, taken *model.Node
}

func newTracker(since time.Time) *tracker {
	return &tracker{
		since:         since,
		services:      make(map[model.ServiceKey]*serviceEntry),
		nodes:         make(map[string]*nodeEntry),
		dirtyServices: make(map[model.ServiceKey]struct{}),
		dirtyNodes:    make(map[string]struct{}),
	}
}

func (t *tracker) service(key model.ServiceKey) *serviceEntry {
	e := t.services[key]
	if e == nil {
		e = &serviceEntry{}
		t.services[key] = e
	}
	return e
}

// setService records a Service's current state, nil once deleted, and
// reports whether it differs from the previous one.
func (t *tracker) setService(key model.ServiceKey, svc *model.Service) bool {
	if svc == nil && t.services[key] == nil {
		return false
	}
	e := t.service(key)
	if reflect.DeepEqual(e.service, svc) {
		return false
	}
	e.service = svc
	t.dirtyServices[key] = struct{}{}
	return true
}

// setSlice records the endpoints of one EndpointSlice of a Service and the
// slice's trigger time (zero when unknown), recomputes that Service's
// endpoints only, and reports whether they changed.
func (t *tracker) setSlice(key model.ServiceKey, slice string, eps []model.Endpoint, trigger time.Time) bool {
	e := t.service(key)
	if trigger.After(t.since) {
		e.triggers = append(e.triggers, trigger)
		t.dirtyServices[key] = struct{}{}
	}
	if old, ok := e.slices[slice]; ok && reflect.DeepEqual(old, eps) {
		return false
	}
	if e.slices == nil {
		e.slices = make(map[string][]model.Endpoint)
	}
	e.slices[slice] = eps
	return t.remerge(key, e)
}

// deleteSlice forgets an EndpointSlice of a Service and reports whether
// the Service's endpoints changed.
func (t *tracker) deleteSlice(key model.ServiceKey, slice string) bool {
	e := t.services[key]
	if e == nil {
		return false
	}
	if _, ok := e.slices[slice]; !ok {
		return false
	}
	delete(e.slices, slice)
	return t.remerge(key, e)
}

func (t *tracker) remerge(key model.ServiceKey, e *serviceEntry) bool {
	t.dirtyServices[key] = struct{}{}
	eps := mergeEndpoints(e.slices)
	if reflect.DeepEqual(eps, e.endpoints) {
		return false
	}
	e.endpoints = eps
	return true
}

// endpointID is what makes two endpoints of a Service the same one.
type endpointID struct {
	key      model.EndpointKey
	portName string
}

// mergeEndpoints merges the endpoints of a Service's slices, sorted, with
// duplicates across slices collapsed: a ready copy wins, otherwise the one
// of the first slice by name, so the result does not depend on the order
// of events.
func mergeEndpoints(slicesByName map[string][]model.Endpoint) []model.Endpoint {
	if len(slicesByName) == 1 {
		// The common case: one slice, already sorted by identity (as
		// convertSlice returns it), is shared as is (neither is mutated).
		for _, eps := range slicesByName {
			if strictlySorted(eps) {
				if len(eps) == 0 {
					return nil
				}
				return eps
			}
		}
	}
	names := slices.Sorted(maps.Keys(slicesByName))
	n := 0
	for _, name := range names {
		n += len(slicesByName[name])
	}
	if n == 0 {
		return nil
	}
	out := make([]model.Endpoint, 0, n)
	seen := make(map[endpointID]int, n)
	for _, name := range names {
		for _, ep := range slicesByName[name] {
			id := endpointID{ep.Key(), ep.PortName}
			if i, ok := seen[id]; ok {
				if ep.Ready && !out[i].Ready {
					out[i] = ep
				}
				continue
			}
			seen[id] = len(out)
			out = append(out, ep)
		}
	}
	slices.SortFunc(out, compareEndpoint)
	return out
}

// strictlySorted reports whether endpoints are sorted with no identity
// repeated.
func strictlySorted(eps []model.Endpoint) bool {
	for i := 1; i < len(eps); i++ {
		if compareEndpoint(eps[i-1], eps[i]) >= 0 {
			return false
		}
	}
	return true
}

// setNode records a Node's current state, nil once deleted, and reports
// whether it differs from the previous one.
func (t *tracker) setNode(name string, node *model.Node) bool {
	e := t.nodes[name]
	if e == nil {
		if node == nil {
			return false
		}
		e = &nodeEntry{}
		t.nodes[name] = e
	}
	if reflect.DeepEqual(e.current, node) {
		return false
	}
	e.current = node
	t.dirtyNodes[name] = struct{}{}
	return true
}

// node returns a Node's current state, nil when unknown.
func (t *tracker) node(name string) *model.Node {
	if e := t.nodes[name]; e != nil {
		return e.current
	}
	return nil
}

// take returns the current state of every Service and Node that differs
// from what the previous take returned, with the trigger times of the
// reported Services, and remembers it as handed out. The work is
// proportional to the keys touched since the previous take.
func (t *tracker) take() model.Delta {
	var d model.Delta
	for key := range t.dirtyServices {
		e := t.services[key]
		cur := model.ServiceState{Service: e.service, Endpoints: e.endpoints}
		if !stateEqual(cur, e.taken) {
			if d.Services == nil {
				d.Services = make(map[model.ServiceKey]model.ServiceState)
			}
			d.Services[key] = cur
			e.taken = cur
			d.TriggerTimes = append(d.TriggerTimes, e.triggers...)
		}
		e.triggers = nil
		if e.service == nil && len(e.slices) == 0 {
			delete(t.services, key) // gone, and reported gone
		}
	}
	t.dirtyServices = reset(t.dirtyServices)
	for name := range t.dirtyNodes {
		e := t.nodes[name]
		if !reflect.DeepEqual(e.current, e.taken) {
			if d.Nodes == nil {
				d.Nodes = make(map[string]*model.Node)
			}
			d.Nodes[name] = e.current
			e.taken = e.current
		}
		if e.current == nil {
			delete(t.nodes, name)
		}
	}
	t.dirtyNodes = reset(t.dirtyNodes)
	slices.SortFunc(d.TriggerTimes, time.Time.Compare)
	return d
}

// reset empties a dirty set. A map that held many keys is replaced, not
// cleared: clearing and ranging over a Go map cost its capacity, so a
// map grown by the first take would make every later take pay for the
// whole cluster.
func reset[K comparable](m map[K]struct{}) map[K]struct{} {
	if len(m) > 64 {
		return make(map[K]struct{})
	}
	clear(m)
	return m
}

func stateEqual(a, b model.ServiceState) bool {
	return (a.Service == b.Service || reflect.DeepEqual(a.Service, b.Service)) &&
		reflect.DeepEqual(a.Endpoints, b.Endpoints)
}
