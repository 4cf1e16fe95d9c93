// Package config owns the daemon's configuration file: the versioned
// SwitchyardConfig YAML (apiVersion switchyard.dev/v1alpha2), its types,
// their defaults, strict parsing, validation and reloading on change.
//
// The dataplane section holds the settings every dataplane shares (mode,
// syncPeriod, minSyncPeriod, masqueradeAll, clusterCIDRs,
// nodePortAddresses) and one block per dataplane with its own settings
// (dataplane.ipvs: scheduler, connection timeouts, strictARP). A file in
// the older switchyard.dev/v1alpha1, where the shared settings sat under
// dataplane.ipvs, is still read and converted (convert.go); every other
// section is the same in both versions. It is deprecated: Deprecation
// (and a Watcher's, for the file it last read) is the warning the daemon
// logs each time it reads one.
//
// Parse is strict: an unknown field, a wrong type, a duplicate key or a
// second YAML document is an error naming the field and its line (a field
// written where the other version has it says so). Validate then reports
// every remaining problem at once, each with its field path (for example
// "dataplane.syncPeriod", or "dataplane.ipvs.syncPeriod" in a v1alpha1
// file). What another package decides, such as the schedulers a dataplane
// supports, is checked by the Checks the caller passes (SchedulerCheck),
// reported the same way. Defaults are documented on the fields and
// applied in one place, SetDefaults.
//
// A Watcher re-reads the file when its content changes (ConfigMap volumes
// swap a symlink, so it polls a hash of the content rather than watching
// inotify events) and hands over only configs that parse, validate and
// pass its checks; the last good one stays in force otherwise.
package config
