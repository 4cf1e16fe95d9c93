// Package kpbench measures switchyard side by side with upstream
// kube-proxy in IPVS mode and in nftables mode, and against the floor: a
// plain cloudflare/ipvs loop creating the same kernel objects. Everything runs in
// one kernel lab guest (test/lab), one after the other on the same kernel,
// so that the ratios come from one run: TCG inflates absolute times.
//
// It owns the workload (N ClusterIP Services x 10 endpoints, and the
// endpoint changes, and the policy ConfigMap and annotations of the
// WebAssembly run), reading the kernel's IPVS table back from
// /proc/net/ip_vs and kube-proxy's nftables table from `nft list` (the
// service-ips map and each service chain's DNAT map), the few Prometheus
// samples the measurements need, and the result table. The pieces that run:
//
//   - BenchmarkIntegrationKubeProxyIPVS (build tag integration; `make
//     bench-kubeproxy`) starts etcd and kube-apiserver on the host
//     (test/apitest), creates the Services and EndpointSlices, boots one
//     guest on qemu user networking (the host's loopback is 10.0.2.2 there)
//     with kube-proxy, switchyard, and Debian's iptables-nft, ipset and nft
//     with their libraries (labrun's extras), and prints the table;
//   - cmd/kpguest, the guest's job: it measures the floor, then for
//     kube-proxy --proxy-mode=ipvs, kube-proxy --proxy-mode=nftables (with
//     the kernel's IPv6 off, so that it runs single-stack as the others
//     do) and the switchyard daemon (ipvs dataplane) the time from start
//     until the kernel's table is complete and until the first full sync
//     ended, then endpoint changes made through the API server until each
//     is visible in the kernel, with CPU, and RSS after the first sync and
//     at the end;
//     between runs it removes every IPVS service, the dummy links, the
//     nftables ruleset and the ipsets, and reloads the IPVS modules: the
//     kernel keeps deleted real servers for minutes and scans them on
//     every one added, which made a run after another up to 2x slower.
//     Switchyard also runs with balancing policies (policy.go): every
//     Service on a non-default built-in policy (the cluster default of its
//     config), and 100 Services on a WebAssembly policy that the guest
//     delivers as the product does (a policy ConfigMap and the Services'
//     annotation, both taken away after the run); such a run fails unless
//     its policy was evaluated for each of its Services without a failure.
//     With "switch" (KPBENCH_ONLY) it runs kube-proxy until the table is
//     programmed, stops it, runs switchyard --cleanup-kube-proxy, the
//     daemon until its table is complete (the outage is from the cleanup's
//     start), stops it, runs switchyard --cleanup, and lists what each
//     cleanup left of its proxy's objects (Result.Switch).
package kpbench
