package lb

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

	"github.com/switchyard-lb/switchyard/core/config"
	"github.com/switchyard-lb/switchyard/core/election"
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
)

// Type is how the Manager builds one announcer type from its config.
type Type struct {
	// Mode is how the election picks the nodes announcing an address:
	// election.Layer2 (one node) or election.BGP (every eligible node).
	Mode election.Mode
	// WithNodes makes every announcement carry the nodes that serve its
	// address (plugin.ElectedAnnouncer.WithNodes).
	WithNodes bool
	// Async is set for announcers that act after Announce returns: their
	// outcomes reach the AnnounceFailed Events through Env.Result.
	Async bool
	// NeedsNode delays New until the watch has reported this node, which
	// New then finds in Env.Self. Until then the announcer announces
	// nothing and fails readiness; a failed New is tried again at the
	// next change of the nodes.
	NeedsNode bool
	// Grace is how long the announcer may fail readiness before the pod
	// turns unready while it is not built; Instance.Grace once it is.
	Grace time.Duration
	// Check, when set, reports what is wrong with ac before New runs: at
	// once, so that the daemon refuses to start on it even when New
	// waits for the node. Optional.
	Check func(ac config.Announcer) error
	// New builds the announcer ac configures on this node.
	New func(ctx context.Context, env Env, ac config.Announcer) (*Instance, error)
}

// Types is the registry of announcer types, keyed by the config's type
// string (config.Announcer.Type).
type Types map[string]Type

// Builtin returns the announcer types Switchyard ships: arp, bgp, cloud.
func Builtin() Types {
	return Types{
		config.AnnouncerARP:   ARP,
		config.AnnouncerBGP:   BGP,
		config.AnnouncerCloud: Cloud,
	}
}

// Check is the config.Check of the types: it refuses an announcer whose
// type is not registered, naming those that are, and reports what the
// Check of a type registered outside core/config finds in its settings,
// so that the daemon refuses such a config at start and keeps its last
// good config on a reload. (core/config validates the built-in types'
// blocks itself; their Checks run when New builds them.)
func (ts Types) Check(c *config.Config) config.Errors {
	errs := config.AnnouncerTypeCheck(slices.Collect(maps.Keys(ts))...)(c)
	for i, ac := range c.Announcers {
		if t, ok := ts[ac.Type]; ok && t.Check != nil && !slices.Contains(config.BuiltinAnnouncerTypes, ac.Type) {
			if err := t.Check(ac); err != nil {
				errs = append(errs, &config.FieldError{Path: fmt.Sprintf("announcers[%d]", i), Msg: err.Error()})
			}
		}
	}
	return errs
}

// Env is what a Type's New may use.
type Env struct {
	// NodeName is this node's name.
	NodeName string
	// Self is this node as the watch reported it; nil unless the type
	// NeedsNode.
	Self *model.Node
	// Log is the daemon's logger, with the announcer's name.
	Log *slog.Logger
	// Secrets reads Secrets of the daemon's namespace.
	Secrets *Secrets
	// Result reports an outcome that arrived after Announce returned
	// (Type.Async): the AnnounceFailed Events follow it. Safe to call
	// from any goroutine, before New returns too (then it is dropped).
	Result func(addr netip.Addr, withdraw bool, err error)
}

// Instance is a running announcer. The Manager calls every method that
// changes it (Announcer.Announce and Close, SetNodes, Follow's Apply)
// from one goroutine, the announcer's owner; Probe and Collect may run
// concurrently with them.
type Instance struct {
	// Announcer announces; the Manager gives it the config's name.
	Announcer plugin.Announcer
	// Probe returns why the announcer cannot announce from this node
	// (its part of /readyz); nil: it never makes the pod unready.
	Probe func() error
	// Grace is how long Probe must keep failing before the pod is unready.
	Grace time.Duration
	// SetNodes, when set, receives the ready nodes the announcer's node
	// selector picks, whenever they or the selector change.
	SetNodes func(nodes []*model.Node) error
	// Follow are Secrets the announcer follows: each change of one is
	// passed to its Apply.
	Follow []Follow
	// Collect, when set, reports the announcer's metrics at scrape time.
	Collect func(ch chan<- prometheus.Metric)
	// State, when set, returns the announcer's part of /debug/state (a
	// value that marshals to JSON), at request time.
	State func() any
	// Restart, when set, ends the announcer in place of
	// Announcer.Close when the daemon stops for a restart
	// (Intent.Restart), leaving in place what may stay until the
	// restarted daemon takes over (BGP graceful restart).
	Restart func() error
}

// Follow is a Secret an announcer follows.
type Follow struct {
	// Name is the Secret's name in the daemon's namespace.
	Name string
	// Apply receives the Secret after every change and resync, and nil
	// once it is deleted.
	Apply func(ctx context.Context, s *corev1.Secret)
}
