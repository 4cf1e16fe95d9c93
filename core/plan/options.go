package plan

import (
	"net/netip"
	"slices"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
)

// Defaults for the zero values of Options.
const (
	DefaultScheduler         = "rr"
	DefaultLoadBalancerClass = "switchyard.dev/lb"
)

// Options are the node-wide settings planning depends on.
type Options struct {
	// NodePortAddresses selects the node addresses that carry NodePorts.
	// For each IP family, an address is used when it lies in one of the
	// prefixes of its family, or always when no prefix of its family is
	// given (kube-proxy's --nodeport-addresses). Empty = all
	// Node.Addresses.
	NodePortAddresses []netip.Prefix
	// NodePortPrimary, when true, puts NodePorts only on the node's
	// primary address of each family instead (kube-proxy's
	// --nodeport-addresses=primary): the first InternalIP of the family
	// in the Node's status, else its first ExternalIP. NodePortAddresses
	// is then ignored.
	NodePortPrimary bool
	// Scheduler is the default scheduler; "rr" when empty.
	Scheduler string
	// Schedulers are the schedulers the dataplane supports, which a
	// switchyard.dev/scheduler annotation may name (the dataplane, when
	// it is a plugin.SchedulerSet). nil: none, every Service gets
	// Scheduler. Its dynamic type must be comparable (a pointer).
	Schedulers plugin.SchedulerSet
	// LoadBalancerClass is our class; "switchyard.dev/lb" when empty.
	LoadBalancerClass string
	// IgnoreUnclassed, when true, keeps LoadBalancer Services without a
	// class from being announced.
	IgnoreUnclassed bool
	// ForwardingMode is the forwarding mode of Services without the
	// switchyard.dev/forwarding-mode annotation; ForwardingDefault means
	// nat.
	ForwardingMode model.ForwardingMode
	// DSREncapsulation is dataplane.dsr.encapsulation. Planning does
	// not depend on it (IPv6 frontends are dsr over ip6ip6 and GUE over
	// IPv6 alike); a change replans every Service all the same, as the
	// dsr side's tables are rebuilt.
	DSREncapsulation model.Encapsulation
}

// normalized returns a copy of o with defaults filled in, owning its slice.
func (o *Options) normalized() Options {
	n := Options{
		NodePortAddresses: slices.Clone(o.NodePortAddresses),
		NodePortPrimary:   o.NodePortPrimary,
		Scheduler:         o.Scheduler,
		Schedulers:        o.Schedulers,
		LoadBalancerClass: o.LoadBalancerClass,
		IgnoreUnclassed:   o.IgnoreUnclassed,
		ForwardingMode:    o.ForwardingMode,
		DSREncapsulation:  o.DSREncapsulation,
	}
	if n.ForwardingMode == model.ForwardingDefault {
		n.ForwardingMode = model.ForwardingNAT
	}
	if n.Scheduler == "" {
		n.Scheduler = DefaultScheduler
	}
	if n.LoadBalancerClass == "" {
		n.LoadBalancerClass = DefaultLoadBalancerClass
	}
	return n
}

func (o *Options) equal(p *Options) bool {
	return o.Scheduler == p.Scheduler && o.Schedulers == p.Schedulers && o.LoadBalancerClass == p.LoadBalancerClass &&
		o.IgnoreUnclassed == p.IgnoreUnclassed && o.ForwardingMode == p.ForwardingMode && o.DSREncapsulation == p.DSREncapsulation && o.NodePortPrimary == p.NodePortPrimary && slices.Equal(o.NodePortAddresses, p.NodePortAddresses)
}
