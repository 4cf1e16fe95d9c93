// Package logging builds the daemon's log/slog logger from its flags and
// routes client-go's klog output into it, so that every line the process
// writes has one format. It owns no global logger of its own: the logger
// it returns is passed down explicitly.
package logging
