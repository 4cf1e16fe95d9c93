// Package conformance runs upstream's e2e.test (the Services, Conntrack,
// EndpointSlice and KubeProxy network specs) on test/node's real node
// against each service proxy in turn, Switchyard and upstream kube-proxy
// in IPVS and nftables mode, and tabulates the results (make conformance).
//
// It owns:
//
//   - the proxies' lifecycles on the node: Switchyard deployed as users do
//     (kubectl apply -k of deploy/ with make image's image), kube-proxy as
//     upstream ships it (its static binary, a process in the guest), and
//     the switch between them through the real cleanup paths
//     (`switchyard --cleanup`, `switchyard --cleanup-kube-proxy`);
//   - running e2e.test in the node's network namespace, with its JUnit
//     report and log kept per proxy (Store), so a run can be read again;
//   - reading those reports (ParseJUnit) and the one table that compares
//     the proxies spec by spec (Table): both pure.
//
// The node itself (boot, images, DNS add-on) is test/node's.
package conformance
