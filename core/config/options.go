package config

import "github.com/switchyard-lb/switchyard/core/plan"

// PlanOptions returns the planner's options from a config with its
// defaults applied.
func (c *Config) PlanOptions() plan.Options {
	return plan.Options{
		NodePortAddresses: c.Dataplane.NodePortAddresses.Prefixes(),
		NodePortPrimary:   c.Dataplane.NodePortAddresses.Primary(),
		Scheduler:         c.Dataplane.IPVS.Scheduler,
		LoadBalancerClass: c.LoadBalancerClass,
		IgnoreUnclassed:   c.IgnoreUnclassed,
	}
}
