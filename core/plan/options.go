package plan

import (
	"net/netip"
	"slices"
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
	// Scheduler is the default IPVS scheduler; "rr" when empty.
	Scheduler string
	// LoadBalancerClass is our class; "switchyard.dev/lb" when empty.
	LoadBalancerClass string
	// IgnoreUnclassed, when true, keeps LoadBalancer Services without a
	// class from being announced.
	IgnoreUnclassed bool
}

// normalized returns a copy of o with defaults filled in, owning its slice.
func (o *Options) normalized() Options {
	n := Options{
		NodePortAddresses: slices.Clone(o.NodePortAddresses),
		Scheduler:         o.Scheduler,
		LoadBalancerClass: o.LoadBalancerClass,
		IgnoreUnclassed:   o.IgnoreUnclassed,
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
	return o.Scheduler == p.Scheduler && o.LoadBalancerClass == p.LoadBalancerClass &&
		o.IgnoreUnclassed == p.IgnoreUnclassed && slices.Equal(o.NodePortAddresses, p.NodePortAddresses)
}

// ValidScheduler reports whether name is an IPVS scheduler the Linux
// kernel ships (net/netfilter/ipvs/ip_vs_*.c), so that a
// switchyard.dev/scheduler annotation can name it.
func ValidScheduler(name string) bool {
	switch name {
	case "rr", "wrr", "lc", "wlc", "lblc", "lblcr", "dh", "sh", "sed", "nq", "fo", "ovf", "mh", "twos":
		return true
	}
	return false
}
