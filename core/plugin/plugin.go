// Package plugin holds every contract between Switchyard's control loop
// (core/reconcile, with its policy stage core/policystage) and what it
// drives or reads:
//
//   - the three plugin kinds: the Dataplane that forwards packets (and
//     may read its live statistics, StatsReader, and name the schedulers
//     it supports, SchedulerSet), the Announcers that make
//     LoadBalancer addresses reachable (each driven through an
//     ElectedAnnouncer: its election mode, pools and node selector), and
//     the balancing Policy that weighs endpoints;
//   - Source, the watch layer the loop takes changes from (core/k8s);
//   - Policies, which resolves a Service's policy (plugins/registry), and
//     PolicyReporter, which tells the user about it;
//   - the values they exchange: the reasons of policy Events and
//     conditions, the policy failure reasons and the errors that carry
//     them (FailureReason), announcers' AddrErrors;
//   - CheckResult, the check every policy result passes, whose
//     OutputError names all of a result's problems at once.
//
// It holds interfaces, their value types, errors and that check only,
// and imports nothing but core/model and the pure core/election (for an
// elected announcer's mode and node selector), so plugins never import
// the loop.
package plugin

import (
	"context"
	"net/netip"
	"time"

	"github.com/switchyard-lb/switchyard/core/model"
)

// Update is one round of desired state for a Dataplane.
type Update struct {
	// Plan is the whole desired state; read-only for the dataplane. A
	// ServicePlan is never modified once in a Plan: a changed Service
	// gets a new one.
	Plan *model.Plan
	// Changed lists the Services whose plan may differ from the previous
	// Apply (added, updated or deleted: a deleted Service is absent from
	// Plan). With Full set, a dataplane may take a Service that Changed
	// does not list and whose ServicePlan is the same pointer as before
	// as unchanged in the plan (never in the kernel, which it reads).
	Changed []model.ServiceKey
	// Full asks the dataplane to reconcile everything it owns against
	// Plan: on the first Apply, on a periodic resync and after an error.
	Full bool
}

// Dataplane programs the kernel so that it forwards what the plan wants.
// Apply is called from one goroutine at a time. It must never remove state
// it does not own, and Close must leave working forwarding in place: a
// restart or a shutdown never flushes traffic.
type Dataplane interface {
	Name() string
	Apply(ctx context.Context, u Update) error
	Close() error
}

// AddOnlyDataplane is a Dataplane that can apply a plan made from partial
// data, before every cache of the Source has synced, so that the kernel
// work of a start overlaps the lists: the loop calls ApplyAddOnly while
// the caches list, and Apply with Full set once they have synced (the
// only Apply that prunes, as kube-proxy syncs nothing before). Apply's
// rules hold for it too.
type AddOnlyDataplane interface {
	Dataplane
	// ApplyAddOnly adds and updates what u.Plan wants of the Services in
	// u.Changed (of every Service in u.Plan at the first call) and
	// removes nothing: no virtual service deleted (owned, stale or
	// foreign), no address unbound, no real server drained, deleted or
	// set to weight 0, nothing taken out of other kernel tables. u.Full
	// is unset.
	ApplyAddOnly(ctx context.Context, u Update) error
}

// Announcer makes addresses reachable at this node. Announce is
// declarative: set is the complete set this node should announce now, and
// an empty set withdraws everything. It is called from one goroutine at a
// time, after the dataplane serves every address in set.
type Announcer interface {
	Name() string
	Announce(ctx context.Context, set []model.Announcement) error
	Close() error
}

// Policy decides, for one Service port, which endpoints get new traffic
// and with what weight. It runs in the control loop, never per packet, and
// may be called concurrently for different Services.
type Policy interface {
	Name() string
	Evaluate(ctx context.Context, in *PolicyInput) (PolicyResult, error)
}

// PolicyInput is what a policy sees of one Service port.
type PolicyInput struct {
	Service *model.Service
	Port    model.ServicePort
	Node    *model.Node
	Now     time.Time
	// Params is the JSON of switchyard.dev/policy-params, or the policy's
	// defaults.
	Params []byte
	// Endpoints are the candidates the traffic policies left, sorted by
	// address then port.
	Endpoints []PolicyEndpoint
}

// PolicyEndpoint is a candidate endpoint with what is known of it.
type PolicyEndpoint struct {
	model.Endpoint
	// Local is set when the endpoint runs on this node; SameZone when it
	// runs in this node's zone.
	Local, SameZone bool
	// FirstSeen is when the daemon first saw the endpoint.
	FirstSeen time.Time
	Stats     EndpointStats
}

// EndpointStats are live IPVS counters of a real server.
type EndpointStats struct {
	ActiveConns, InactiveConns uint32
	ConnRate                   uint32 // connections per second
	BytesInRate, BytesOutRate  uint64 // bytes per second
}

// StatsReader is implemented by a Dataplane that can report the live
// counters of the real servers it programs. The policy stage reads it once
// per statistics tick, from the loop's goroutine, for the virtual services
// of the Services it evaluates then, and fills PolicyEndpoint.Stats from
// that read until the next tick.
type StatsReader interface {
	// Stats returns the counters of keys' virtual services by virtual
	// service, then by real server address and port; a virtual service
	// the dataplane does not program is absent. On error it returns what
	// it could read with the error: a virtual service that failed is
	// absent.
	Stats(keys []model.VirtualServiceKey) (map[model.VirtualServiceKey]map[netip.AddrPort]EndpointStats, error)
}

// SchedulerSet is implemented by a Dataplane that lets Services and
// policies choose among schedulers (model.VirtualService.Scheduler). The
// planner accepts a switchyard.dev/scheduler annotation, and the policy
// stage a PolicyResult.Scheduler, only when the dataplane supports the
// name; without a SchedulerSet neither is accepted and every virtual
// service keeps the configured default. The daemon also refuses a config
// whose default scheduler the dataplane's set does not hold. Its methods
// must be goroutine-safe and pure: the same name always gets the same
// answer.
type SchedulerSet interface {
	// SupportsScheduler reports whether the dataplane can program the
	// scheduler name.
	SupportsScheduler(name string) bool
	// WeightedScheduler returns the scheduler to program in place of
	// name when a virtual service's destinations have unequal weights:
	// name itself when it honours weights, else a supported one that
	// does (IPVS: wrr for rr, which ignores weights).
	WeightedScheduler(name string) string
	// Schedulers returns every name SupportsScheduler accepts, in a
	// stable order, for messages such as a config's refusal of another
	// (core/config.SchedulerCheck); the caller owns the slice.
	Schedulers() []string
}

// PolicyResult is a policy's decision for one Service port.
type PolicyResult struct {
	// Weights is index-aligned with PolicyInput.Endpoints; 0 drains.
	Weights []uint32
	// Scheduler and Flags, when Scheduler is non-empty, override the IPVS
	// scheduler for the Service port.
	Scheduler string
	Flags     []string
	// Reevaluate, when non-zero, asks to be evaluated again after it even
	// if nothing changed.
	Reevaluate time.Duration
}

// HealthReporter is implemented by plugins that can say whether they are
// working, for /readyz and /debug/state.
type HealthReporter interface {
	Healthy() error
}

// AddrError is an announcer's failure to announce or withdraw one
// address. Announce returns them, joined with errors.Join when several
// fail, so that the caller can tell the Services of the address (as
// AnnounceFailed Events); other errors concern the announcer as a whole.
type AddrError struct {
	Addr netip.Addr
	// Withdraw is set when withdrawing failed, unset when announcing.
	Withdraw bool
	Err      error
}

func (e *AddrError) Error() string {
	op := "announcing"
	if e.Withdraw {
		op = "withdrawing"
	}
	return op + " " + e.Addr.String() + ": " + e.Err.Error()
}

func (e *AddrError) Unwrap() error { return e.Err }

// AddrErrors returns every AddrError in err's tree (errors.Join and %w
// wrapping included), in tree order.
func AddrErrors(err error) []*AddrError {
	var out []*AddrError
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case nil:
		case *AddrError:
			out = append(out, e)
		case interface{ Unwrap() []error }:
			for _, x := range e.Unwrap() {
				walk(x)
			}
		case interface{ Unwrap() error }:
			walk(e.Unwrap())
		}
	}
	walk(err)
	return out
}
