//go:build wasip1

// Command zoneaware is an example policy: keep traffic in this node's
// zone, and spill some to other zones when the zone is busy.
//
// Usable endpoints are the ready ones, or when none is ready, the serving
// terminating ones. Usable endpoints in this zone get localWeight. Usable
// endpoints elsewhere get 0, unless the zone is busy (its endpoints
// average at least spillAt active connections) when they get spillWeight.
// With no usable endpoint in this zone, every usable endpoint gets
// localWeight. The scheduler is wrr, and the policy asks to be evaluated
// again every 10 s so spill-over follows the load.
//
// Parameters (JSON, all optional): {"spillAt": 100, "localWeight": 100,
// "spillWeight": 10}.
package main
