// Package node brings up real Kubernetes nodes in the qemu lab (one by
// default): each a kubelet with containerd, runc and the CNI bridge plugin
// in a TCG guest, and their control plane (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler) on the host, in a network
// namespace of its own.
//
// It owns the whole node and nothing else:
//
//   - the host side: the network namespace NetnsName holding the bridge
//     BridgeName (HostIP) with each guest's tap as a port, the control
//     plane listening there, and a route to each guest's pod network via
//     the guest (the API server proxies to pod IPs);
//   - the guests (Options.Guests, one by default; Guest): each a node
//     with its own kernel, so its own IPVS table, nftables and conntrack,
//     on one L2 with routes to the others' pod CIDRs (no overlay). Each
//     runs test/lab's PVH kernel, a small initramfs (busybox, the
//     virtio, ext4 and 9p modules) that mounts the node's ext4 disk (a
//     copy of test/node/rootfs.sh's image, kept across boots so that
//     imported images stay) and the host's 9p share, and switches root to
//     the disk, where guest/init.sh configures the node and starts
//     containerd and the kubelet; images come as docker archives on the
//     share and are imported once per disk (no registry);
//   - a command agent: guest/init.sh runs the scripts the host drops on the
//     share and writes their output and exit status back (Node.Exec).
//
// Up starts everything and returns once every Node is Ready and the images
// are imported; the processes outlive the caller (they run in sessions
// of their own, their pids in the state directory), so a command can
// bring the node up and another take it down (Open, Node.Down). One
// cluster per state directory and per host: the namespace and addresses
// are fixed. Node.Exec runs in the first guest, Guest.Exec in any;
// Node.PutFile and Node.Import reach every guest.
package node
