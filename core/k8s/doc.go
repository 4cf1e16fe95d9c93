// Package k8s owns Switchyard's view of the Kubernetes API: client-go
// informers for Services, EndpointSlices and Nodes, the conversion of those
// objects into core/model values, and the change tracking that lets the
// reconcile loop work only on what changed.
//
// Kubernetes API types stop here. Informer handlers only record: each
// event is converted, compared with the current state under a mutex, and,
// once every informer has synced, announced through Options.OnChange. The
// loop then calls Source.Take, which hands out the state of every Service
// and Node that differs from what the previous Take handed out; a change
// followed by its undo collapses to nothing. Nothing is reported before
// every cache has synced, so consumers never prune on partial data.
//
// The watches ask the API server only for what this proxy serves, with
// kube-proxy's selectors: Services without the label
// service.kubernetes.io/service-proxy-name, plus (a second watch) those
// naming Options.ServiceProxyName, and in both cases not headless
// (spec.clusterIP!=None); EndpointSlices not labelled
// service.kubernetes.io/headless. A Service relabelled in or out of them
// arrives as a delete and an add; it is gone only when no watch holds it.
//
// A malformed field costs that field only: it is skipped and logged
// ("skipped malformed fields"); the problems the user must see on the
// object (a bad switchyard.dev/forwarding-mode annotation: WarningError,
// ReasonForwardingModeInvalid) go to Options.OnServiceWarning, once per
// change of the Service, for a Warning Event.
//
// List and watch failures are recorded, not logged away: Source.Healthy
// returns the last one (an RBAC denial is named with the permission to
// grant) until a later list or watch of the same resource succeeds.
package k8s
