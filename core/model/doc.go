// Package model owns Switchyard's Kubernetes-free data model: what the
// watch layer reports (services, their ports, endpoints, and nodes with
// every address of their status and its type) and
// what the planner wants the dataplane and announcers to hold (virtual
// services, real servers and announcements).
//
// Kubernetes API types stop at the watch layer (core/k8s); everything past
// it speaks these types. The package uses the standard library only, and
// every type is a plain value: comparable identities (ServiceKey,
// VirtualServiceKey) are separate from settings, so they work as map keys.
package model
