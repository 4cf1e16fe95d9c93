package lb

import (
	"context"

	"github.com/switchyard-lb/switchyard/announcers/cloud"
	"github.com/switchyard-lb/switchyard/core/config"
	"github.com/switchyard-lb/switchyard/core/election"
	"github.com/switchyard-lb/switchyard/core/model"
)

// Cloud is the cloud announcer type: a provider's load balancer driven
// through a webhook (announcers/cloud). The load balancer sends traffic
// to other nodes, so each address goes only to the nodes serving it
// (with externalTrafficPolicy Local, those with a ready endpoint, each
// weighed by its ready endpoints), among the ready nodes its node
// selector picks. The webhook calls happen in the background: their
// failures reach the Events through Env.Result. It never makes the pod
// unready (see announcerHealth).
var Cloud = Type{Mode: election.Layer2, WithNodes: true, Async: true, New: newCloud}

func newCloud(_ context.Context, env Env, ac config.Announcer) (*Instance, error) {
	a, err := cloud.New(cloud.Options{
		URL:       ac.Cloud.URL,
		NodeName:  env.NodeName,
		TokenFile: ac.Cloud.TokenFile,
		Timeout:   ac.Cloud.Timeout.Std(),
		OnCall: func(c cloud.Call) {
			env.Result(c.Addr, c.Op == cloud.OpRelease, c.Err)
			if c.Err != nil {
				env.Log.Warn("cloud webhook", "announcer", ac.Name, "op", c.Op, "address", c.Addr, "status", c.Status, "retry", c.Retry, "err", c.Err)
			} else {
				env.Log.Debug("cloud webhook", "announcer", ac.Name, "op", c.Op, "address", c.Addr, "status", c.Status, "took", c.Duration)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	return &Instance{
		Announcer: a,
		SetNodes: func(nodes []*model.Node) error {
			var front []cloud.Node
			for _, n := range nodes {
				front = append(front, cloud.Node{Name: n.Name, Addrs: n.Addresses})
			}
			return a.SetNodes(front)
		},
	}, nil
}
