// Package lab runs Go test binaries inside a real Linux kernel under qemu,
// for the tests that need kernel features the host lacks (IPVS above all).
//
// It owns the whole path from a Debian kernel package to a test verdict:
//
//   - EnsureAssets turns an unpacked Debian kernel package and a static
//     busybox into the cached boot assets: vmlinux (extracted from the
//     bzImage, so qemu boots it through PVH, seconds faster under TCG) and a
//     base initramfs (busybox, the modules the suites need with a generated
//     modules.dep and modules.alias, and the guest init script). It is built
//     in Go: no cpio tool, no depmod, no root.
//   - Run appends a per-run archive (the test binary, its arguments, its
//     environment and a secret nonce) and boots qemu. The guest writes the
//     binary's output and an exit marker carrying the nonce to its second
//     serial port, which the host reads as a stream. A missing marker, a
//     qemu failure or a timeout is an error, never a pass.
//
// Guest code recognises the guest by the environment variable GuestEnv.
// The labrun command (cmd/labrun) wraps Run so that
// `go test -exec "labrun run"` runs any package's tests in the guest.
//
// Writing a guest suite:
//
//   - every guest-only test skips unless os.Getenv(lab.GuestEnv) == "1",
//     so `go test ./...` on the host stays green and fast;
//   - the guest is a fresh kernel per package run: root, one CPU, 256 MiB,
//     the DefaultModules loaded, loopback up, no NIC unless Job.UserNet
//     (labrun -usernet) attaches one on qemu user networking; the package's
//     testdata/ is copied in and the working directory is its parent;
//   - the guest has no libc of its own: host programs such as Debian's
//     ipset, iptables-nft or nft come in through Job.Extra (labrun -extra
//     /usr/sbin/ipset,...), which copies them to the same paths with their
//     interpreter and shared libraries (the ldd closure, read from the ELF
//     headers) and keeps their symlinks; more kernel modules through
//     Config.Modules (labrun -modules);
//   - list the package in LAB_GUEST_PKGS (test/lab/lab.mk), which runs it
//     with CGO_ENABLED=0 (the guest has no libc) through labrun;
//   - by hand: make test-lab, or
//     CGO_ENABLED=0 go test -exec "$PWD/bin/labrun run" ./pkg (after
//     test/lab/deps.sh and go build -o bin/labrun ./test/lab/cmd/labrun);
//     labrun run -v -console FILE shows timings and the kernel console.
package lab
