// Command kpguest is the kernel lab guest's side of the kube-proxy
// benchmark (package kpbench): on one kernel, one after the other, it
// measures the floor, kube-proxy --proxy-mode=ipvs, kube-proxy
// --proxy-mode=nftables and the switchyard daemon (also with balancing
// policies: a built-in one, and a WebAssembly one whose ConfigMap and
// annotations it writes) on the same workload, cleaning the kernel and
// the daemon's policy cache between runs, and prints a kpbench.Result as one JSON line after kpbench.ResultMarker.
// It runs only inside the lab's Linux guest.
package main
