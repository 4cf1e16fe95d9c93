// Package lastgood owns the last good version of each WebAssembly policy
// kept on the node's disk, so that a daemon restarted while a policy's
// ConfigMap is broken still runs the version that last worked instead of
// falling back to uniform weights (plugins/registry uses it; the daemon
// keeps it in policies.cacheDir/last-good, next to the compilation cache).
//
// A Dir holds one file per policy, named after the policy, written whole
// through a temporary file and a rename: a JSON record (the module's
// sha256, the ConfigMap resourceVersion it came from, its default
// parameters) on the first line, then the module's bytes. Load verifies
// the file before returning it: a file that is truncated, does not parse,
// is over the size limit or whose module's sha256 differs from its record
// is refused with ErrDamaged, and the caller ignores it.
package lastgood
