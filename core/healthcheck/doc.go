// Package healthcheck owns the per-Service health check servers that
// LoadBalancer Services with externalTrafficPolicy Local ask every node to
// run on their healthCheckNodePort, answering as kube-proxy does: any path
// gets JSON naming the Service and its local endpoint count, with status
// 200 when the node has a local endpoint (and the proxy is healthy) and
// 503 otherwise, so cloud load balancers send traffic only to nodes that
// can serve it. The count is also the X-Load-Balancing-Endpoint-Weight
// header (kube-proxy v1.28+; capped at MaxWeight, Google Cloud's limit),
// the node's weight for balancers that weigh backends by health check,
// such as Google Cloud's passthrough Network Load Balancer with
// WEIGHTED_MAGLEV: each node then gets new connections in proportion to
// its ready endpoints, and the node does not balance across nodes again.
//
// Server.Sync is declarative: it opens a listener per port that appears,
// closes those that disappear and updates the counts of the others;
// Server.SetEndpoints updates one open health check's count alone, for a
// change of counts whose cost should not grow with the Services.
package healthcheck
