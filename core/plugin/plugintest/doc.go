// Package plugintest holds goroutine-safe fakes of the contracts in
// core/plugin for tests of the code that drives them: a Dataplane wrapper
// that fails on request, a recording Announcer, a Source of pushed
// deltas, a Policies table of named policies (Func policies count their
// calls), a recording PolicyReporter and a fixed SchedulerSet
// (Schedulers).
package plugintest
