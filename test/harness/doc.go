// Package harness holds the parts every test suite shares: Poll, the one
// way a test waits for a condition (its deadline bounds a failure only,
// it asserts no speed; Cond adapts a yes-or-no condition to it;
// PollStable waits until a condition has held for a whole window, the
// state from which a test measures an event on a loaded machine;
// WatchAbsent measures how long conditions that must hold did not),
// Buffer, a goroutine-safe sink for a daemon's logs, FreePort and
// FreeAddr for the daemon's servers (picked below the kernel's ephemeral
// range, where no other process's connection can take them before the
// daemon binds), and Get for reading them.
//
// It is also the daemon harness of every daemon-level suite on the host
// (cmd/switchyard's unit, integration and end-to-end tests, deploy's):
// WriteConfig writes a config with the servers on free loopback ports
// and the dry-run dataplane unless told otherwise; Daemon is one daemon
// under test, run in a goroutine by Go (the suites of cmd/switchyard
// hand it run or runDaemon, which only package main can call) or as the
// built binary by Exec (BuildDaemon), stopped alike and showing its logs
// when the test failed; Metric, DebugState and WaitReady read its
// servers. ExecIn runs the binary behind a wrapper such as `ip netns
// exec NS`, and SharedDaemon builds it once per test process: test/peers
// runs its daemons in node namespaces that way (Stop, Kill, the logs),
// and reads their servers from inside the namespace with ParseMetric.
// test/cluster and test/node run the daemon inside VMs through their own
// packages.
package harness
