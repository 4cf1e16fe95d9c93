// Package guest holds helpers for programs that run inside the kernel
// lab's VM (test/lab), such as the demo's and the benchmarks' guest
// programs: what every guest with a NIC on qemu user networking needs.
package guest
