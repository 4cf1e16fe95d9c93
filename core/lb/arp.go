package lb

import (
	"context"
	"time"

	"github.com/switchyard-lb/switchyard/announcers/arp"
	"github.com/switchyard-lb/switchyard/core/config"
	"github.com/switchyard-lb/switchyard/core/election"
)

// arpGrace is how long an ARP announcer may be unhealthy before the pod
// turns unready: longer than its readers' longest backoff (5 s), so one
// failed read that recovers does not flip readiness.
const arpGrace = 10 * time.Second

// ARP is the arp announcer type: layer 2 (announcers/arp), one node per
// address.
var ARP = Type{Mode: election.Layer2, Grace: arpGrace, New: newARP}

func newARP(_ context.Context, env Env, ac config.Announcer) (*Instance, error) {
	var ifaces []string // none: every suitable interface
	if ac.ARP != nil {
		ifaces = ac.ARP.Interfaces
	}
	a, err := arp.Listen(ifaces, arp.Options{
		OnError: func(link string, err error) {
			env.Log.Warn("arp announcer", "announcer", ac.Name, "link", link, "err", err)
		},
	})
	if err != nil {
		return nil, err
	}
	return &Instance{Announcer: a, Probe: a.Healthy, Grace: arpGrace}, nil
}
