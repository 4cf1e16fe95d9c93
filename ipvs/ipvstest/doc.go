// Package ipvstest owns goroutine-safe in-memory fakes of the ipvs
// package's kernel interfaces, for tests of code that programs them:
//
//   - Fake (ipvs.Kernel and ipvs.Batcher): the IPVS table. It validates
//     and fails like the kernel (ipvs.ErrExists, ipvs.ErrNotFound), runs a
//     batch's commands in order as the kernel does (each counted as its
//     call, the batch as OpBatch: a round trip), lets tests set connection
//     counts and inject errors, interrupted dumps and dumps that leave
//     services out silently (SkipInDump: the kernel's, under another
//     namespace's changes), and exposes its table as the expected state;
//   - FakeAddresses (ipvs.Addresses and ipvs.AddressBatcher): links and
//     their addresses, with the batches counted;
//   - FakeConntrack (ipvs.Conntrack): the UDP deletions asked of it and
//     the passes over the table they cost;
//   - FakeSysctls (ipvs.Sysctls): kernel parameters;
//   - FakeFirewall (ipvs.Firewall): the nftables table's specs, stamp and
//     owned keys, with its transactions counted;
//   - Crash: wraps any Kernel, Addresses and Firewall (fakes or the real
//     kernel) to kill the process right after a chosen call, so that a
//     test can restart a Dataplane on the state a crash left (its Kernel
//     does not batch: every command is a call a crash can follow).
//
// The ipvs package's contract tests run the same scenarios against each
// fake and, in the kernel lab, against the real kernel.
package ipvstest
