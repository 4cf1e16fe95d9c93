// Package config owns the daemon's configuration file: the versioned
// SwitchyardConfig YAML (apiVersion switchyard.dev/v1alpha1), its types,
// their defaults, strict parsing, validation and reloading on change.
//
// Parse is strict: an unknown field, a wrong type, a duplicate key or a
// second YAML document is an error naming the field and its line. Validate
// then reports every remaining problem at once, each with its field path
// (for example "dataplane.ipvs.scheduler"). Defaults are documented on the
// fields and applied in one place, SetDefaults.
//
// A Watcher re-reads the file when its content changes (ConfigMap volumes
// swap a symlink, so it polls a hash of the content rather than watching
// inotify events) and hands over only configs that parse and validate; the
// last good one stays in force otherwise.
package config
