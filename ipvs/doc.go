// Package ipvs is the IPVS dataplane. So far it owns the narrow interfaces
// in front of the kernel facilities it programs, with their value types and
// real implementations:
//
//   - Kernel, the IPVS table (virtual services, real servers), over
//     cloudflare/ipvs: Netlink;
//   - Addresses, the dummy link switchyard0 that holds the virtual IPs, over
//     vishvananda/netlink: NetlinkAddresses;
//   - Sysctls, the kernel parameters it sets: ProcSysctls.
//
// The reconciler that turns a plan into calls on them is still to come.
// Everything it will read and write goes through these interfaces, so it
// can be tested against the goroutine-safe fakes in ipvstest on any host;
// contract tests run the same scenarios against the fakes and, in the
// kernel lab (make test-lab), against the real kernel, so the fakes cannot
// drift from it. All virtual services use NAT (masquerade) forwarding and a
// full netmask.
package ipvs
