package lb

import "github.com/switchyard-lb/switchyard/core/model"

// Intent is what a stopping daemon expects of its node: back on it soon
// (a restart), or the node is going away.
type Intent struct {
	// Restart is true when the daemon is expected back on this node
	// soon: the DaemonSet's rolling update, kubectl rollout restart, a
	// crash loop, or anything else that leaves the Node in place. What
	// the announcers announced may then stay in place (BGP graceful
	// restart). False: the node is going away, and traffic must leave
	// it before it goes.
	Restart bool
	// Reason says what decided it, for the log.
	Reason string
}

// ShutdownIntent decides, from this node as the watch last reported it,
// whether a daemon stopping now is restarting or its node is going away.
// known says whether the watch ever reported the node: self is nil and
// known when the Node was deleted since. It reads the state the watch
// already holds and nothing else: a stopping daemon has no time to ask
// the API server, which may be unreachable anyway.
//
// The node is going away when its Node is deleted or being deleted (a
// deletionTimestamp, or the cluster autoscaler's
// ToBeDeletedByClusterAutoscaler taint), cordoned (kubectl drain cordons
// first; a DaemonSet's pods are not evicted, but the node is being
// emptied), or shutting down (the kubelet's graceful node shutdown, or
// the out-of-service taint). Otherwise the daemon is restarting, also
// when the watch never reported the node: stale routes then last at most
// the graceful restart time.
func ShutdownIntent(self *model.Node, known bool) Intent {
	switch {
	case self == nil && known:
		return Intent{Reason: "the Node was deleted"}
	case self == nil:
		return Intent{Restart: true, Reason: "the watch has not reported this node; assuming a restart"}
	case self.Deleting:
		return Intent{Reason: "the Node is being deleted (deletionTimestamp or ToBeDeletedByClusterAutoscaler taint)"}
	case self.ShuttingDown:
		return Intent{Reason: "the node is shutting down (the kubelet's graceful node shutdown, or the out-of-service taint)"}
	case self.Unschedulable:
		return Intent{Reason: "the Node is cordoned (unschedulable, as kubectl drain leaves it)"}
	}
	return Intent{Restart: true, Reason: "the Node is neither deleted, cordoned nor shutting down"}
}
