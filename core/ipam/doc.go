// Package ipam owns the pure core of LoadBalancer address management:
// address pools (CIDRs and ranges, IPv4 and IPv6, with namespace and
// Service selectors) and the Allocator that decides which addresses each
// LoadBalancer Service holds.
//
// The package does no I/O and knows nothing of Kubernetes: the controller
// that elects one allocator across the DaemonSet, reads Services and writes
// status.loadBalancer.ingress translates to and from Request and the
// addresses returned here. Its decisions are deterministic: the same pools
// and the same requests, processed in the same order, give the same
// addresses, so a new leader reaches the same state as the one it replaces
// (see Allocator.Sync).
//
// Guarantees, checked by the property test: an address is never handed to
// two Services unless both carry the same sharing key and backend key and
// their ports do not clash; an address is always inside a pool the Service
// may use; an existing valid assignment is kept (never renumbered).
package ipam
