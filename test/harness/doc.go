// Package harness holds the parts every test suite shares: Poll, the one
// way a test waits for a condition (its deadline bounds a failure only,
// it asserts no speed; Cond adapts a yes-or-no condition to it), Buffer,
// a goroutine-safe sink for a daemon's logs, FreeAddr for the daemon's
// servers, and Get for reading them.
//
// It starts nothing itself: the suites run the daemon their own way (as
// main runs it, through runDaemon, or as a built binary) and use these
// parts around it.
package harness
