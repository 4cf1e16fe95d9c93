// Package policystage owns the balancing policy stage of the control
// loop: between the pure planner (core/plan) and the dataplane, it
// evaluates each Service's policy (plugin.Policy, resolved through
// plugin.Policies) per Service port and folds the weights and the
// scheduler into a copy of the planner's plan. The schedulers a policy may
// name, and the one a Service on a scheduler that ignores weights moves to
// when its weights differ (IPVS: rr to wrr), are the dataplane's
// (Config.Schedulers, a plugin.SchedulerSet).
//
// core/reconcile calls Stage.Weigh once per Sync with what the watch
// changed and the planner's plan (a Round); Weigh returns the weighted
// plan and the Services whose weighted plan changed, which are all the
// dataplane is handed. A Service is evaluated when the planner or the
// watch changed it, when its policy changed (Policies.Changed), when its
// last result asked to be re-evaluated (PolicyResult.Reevaluate) and on
// the statistics tick (Config.StatsInterval), which skips Services whose
// policy ignores statistics (plugin.StatsBlind) and failing Services, and
// reads the dataplane's statistics (Config.Stats) only when a Service
// evaluated then may use them. A failed read is counted and keeps the last
// good statistics of what it could not read.
//
// The Services of one round are evaluated on up to Config.Workers
// goroutines, which only read the stage: their results are committed on
// Weigh's goroutine in key order, so the plan, the Events and the
// conditions do not depend on which evaluation ended first. A policy's
// failure (load, trap, deadline, invalid output, panic; named by
// plugin.FailureReason) stays with its Service (a built-in policy,
// plugin.Builtin, is not failed for returning after the deadline: that is
// a busy CPU, not a runaway policy): it falls back per port to
// its last good result when that covers the same endpoints, else to
// uniform weights, and the PolicyReporter (Events, the PolicyReady
// condition), Metrics and Status say why. When Policies resolves a policy
// whose newest version failed to an earlier version, that version is
// evaluated in its place and the failure is reported all the same.
// Status names the version each Service runs when its policy has
// versions (plugin.Versioned: a module digest and where it came from).
// Everything the stage knows of a Service (the watch's view, when its
// endpoints were first seen, its policy and its version, last good
// results, condition and re-evaluation time) is one record, dropped when
// the Service's plan is gone.
package policystage
