package ipvs

import (
	"slices"

	"github.com/switchyard-lb/switchyard/core/plugin"
)

// schedulers are the IPVS schedulers the Linux kernel ships
// (net/netfilter/ipvs/ip_vs_*.c).
var schedulers = []string{"rr", "wrr", "lc", "wlc", "lblc", "lblcr", "dh", "sh", "sed", "nq", "fo", "ovf", "mh", "twos"}

// Schedulers returns the IPVS scheduler names the dataplane accepts, in
// the kernel's order of appearance; the caller owns the slice.
func Schedulers() []string { return slices.Clone(schedulers) }

// SupportsScheduler reports whether name is an IPVS scheduler the kernel
// ships.
func SupportsScheduler(name string) bool { return slices.Contains(schedulers, name) }

// WeightedScheduler returns wrr for rr, which ignores destination weights,
// and name itself for every other scheduler.
func WeightedScheduler(name string) string {
	if name == "rr" {
		return "wrr"
	}
	return name
}

// SchedulerSet is the IPVS dataplane's plugin.SchedulerSet, for use
// before a Dataplane is opened (the daemon checks a config's default
// scheduler with it); a Dataplane answers the same.
var SchedulerSet plugin.SchedulerSet = schedulerSet{}

type schedulerSet struct{}

func (schedulerSet) SupportsScheduler(name string) bool   { return SupportsScheduler(name) }
func (schedulerSet) WeightedScheduler(name string) string { return WeightedScheduler(name) }
func (schedulerSet) Schedulers() []string                 { return Schedulers() }

var _ plugin.SchedulerSet = (*Dataplane)(nil)

// Schedulers is the package's Schedulers (plugin.SchedulerSet).
func (d *Dataplane) Schedulers() []string { return Schedulers() }

// SupportsScheduler is the package's SupportsScheduler
// (plugin.SchedulerSet).
func (d *Dataplane) SupportsScheduler(name string) bool { return SupportsScheduler(name) }

// WeightedScheduler is the package's WeightedScheduler
// (plugin.SchedulerSet).
func (d *Dataplane) WeightedScheduler(name string) string { return WeightedScheduler(name) }
