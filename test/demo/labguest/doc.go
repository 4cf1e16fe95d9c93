// Command labguest is the guest side of `test/demo/run.sh --lab`. It runs as
// the kernel lab's job (test/lab) inside a VM with a user-mode NIC: it
// configures that NIC (10.0.2.15/24, the host's loopback being 10.0.2.2),
// starts the real switchyard daemon from the job's testdata directory with
// the IPVS dataplane, waits until it is ready, and prints what the kernel
// then holds: the IPVS table as `ipvsadm -Ln` shows it, the addresses of
// switchyard0 and the nftables table inet switchyard, as `nft list table`
// prints it when the job brought Debian's nft (run.sh passes labrun
// -extra /usr/sbin/nft), else its chains and sets read over netlink.
package main
