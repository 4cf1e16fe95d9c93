// Package lbipam owns the LoadBalancer address controller: on exactly one
// node of the DaemonSet at a time, chosen with a Kubernetes Lease
// (client-go leader election), it decides the addresses of LoadBalancer
// Services and publishes them in status.loadBalancer.ingress.
//
// The decisions are core/ipam's; this package is the Kubernetes side
// around them. A Controller that does not hold the Lease runs no informer
// and holds no allocation state. On becoming leader it starts its own
// Service informer (and a Namespace informer when a pool selects
// namespaces by label), waits for them to sync, lets the
// Allocator claim every address Services already publish (ipam Sync:
// nothing published is ever renumbered), and then one worker processes
// the Services the event handlers queued: it allocates, writes the status
// subresource only when it differs, and releases on delete, on a type
// change away from LoadBalancer or on a class change. Failures (conflict,
// exhausted pool, no pool, invalid request) become AllocationFailed Events
// and a switchyard.dev/AddressAllocated condition on the Service; the
// Service then gets no address rather than a wrong one. A Service is
// never given an address that another Service still publishes: after a
// takeover, or when a status write lags, it waits for the other's status
// to drop it.
//
// Which Services are handled, and what they ask for, is decided by pure
// functions (Handles, RequestFor, DesiredStatus) tested without an API
// server; the integration tests (build tag integration) run the whole
// controller, failover included, against a real kube-apiserver.
package lbipam
