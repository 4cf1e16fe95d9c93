// Package report tells users when an announcer fails one of their
// LoadBalancer addresses: it wraps a plugin.Announcer and turns its
// per-address failures (plugin.AddrError, returned by Announce, or passed
// to Result by an announcer that works in the background, such as the
// cloud webhook) into warning Events with reason AnnounceFailed on every
// Service of the address.
//
// It owns only that bookkeeping: the Services of each address announced
// or being withdrawn, and when each failure was last reported. A failure
// that persists, or comes back, is reported again at most once per
// Options.Interval for the same address and operation, so a broken
// announcer retried on every sync does not flood the API server.
// Failures that name no address (a closed announcer, a cancelled
// context) are the caller's to log.
package report
