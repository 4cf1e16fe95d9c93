// Package ipvstest owns goroutine-safe in-memory fakes of the ipvs
// package's kernel interfaces, for tests of code that programs them:
//
//   - Fake (ipvs.Kernel): the IPVS table. It validates and fails like the
//     kernel (ipvs.ErrExists, ipvs.ErrNotFound), lets tests set connection
//     counts and inject errors, and exposes its table as the expected state;
//   - FakeAddresses (ipvs.Addresses): links and their addresses;
//   - FakeSysctls (ipvs.Sysctls): kernel parameters.
//
// The ipvs package's contract tests run the same scenarios against each
// fake and, in the kernel lab, against the real kernel.
package ipvstest
