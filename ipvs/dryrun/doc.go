// Package dryrun owns the dry-run dataplane: a plugin.Dataplane that keeps
// the IPVS table a plan asks for in memory instead of programming the
// kernel, and renders it exactly as `ipvsadm -Ln` prints a kernel table.
// It is what the daemon uses until the IPVS dataplane lands, what `make
// demo` shows, and the reference the reconcile loop's tests compare with.
// It supports the schedulers the IPVS dataplane does
// (plugin.SchedulerSet, from ipvs.SupportsScheduler and
// ipvs.WeightedScheduler), so a dry run plans what IPVS would.
package dryrun
