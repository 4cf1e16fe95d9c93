package config

import (
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plan"
)

// PlanOptions returns the planner's options from a config with its
// defaults applied.
func (c *Config) PlanOptions() plan.Options {
	return plan.Options{
		NodePortAddresses: c.Dataplane.NodePortAddresses.Prefixes(),
		NodePortPrimary:   c.Dataplane.NodePortAddresses.Primary(),
		Scheduler:         c.Dataplane.IPVS.Scheduler,
		LoadBalancerClass: c.LoadBalancerClass,
		IgnoreUnclassed:   c.IgnoreUnclassed,
		ForwardingMode:    forwardingMode(c.Dataplane.ForwardingMode),
		DSREncapsulation:  dsrEncapsulation(c.Dataplane.DSR.Encapsulation),
	}
}

// forwardingMode is dataplane.forwardingMode for the planner: the
// default (nat) unless it says dsr.
func forwardingMode(s string) model.ForwardingMode {
	if s == ForwardingDSR {
		return model.ForwardingDSR
	}
	return model.ForwardingNAT
}

// dsrEncapsulation is dataplane.dsr.encapsulation for the planner: ipip
// unless it says gue.
func dsrEncapsulation(s string) model.Encapsulation {
	if s == EncapGUE {
		return model.GUE
	}
	return model.IPIP
}
