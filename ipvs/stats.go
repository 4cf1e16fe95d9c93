package ipvs

import (
	"errors"
	"fmt"
	"math"
	"net/netip"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
)

var _ plugin.StatsReader = (*Dataplane)(nil)

// Stats reads the live counters of the real servers of keys' virtual
// services that the dataplane programs (others are left out): one
// destination dump per virtual service, outside the dataplane's lock, so
// that Apply and Drain never wait on it, and nothing for a virtual service
// not asked for: the policy stage asks only for those of the Services it
// evaluates. A virtual service whose dump fails is left out and its error
// joined to the one returned. Destinations that are draining are included:
// they still carry connections.
func (d *Dataplane) Stats(keys []model.VirtualServiceKey) (map[model.VirtualServiceKey]map[netip.AddrPort]plugin.EndpointStats, error) {
	d.mu.Lock()
	owned := make([]model.VirtualServiceKey, 0, len(keys))
	for _, k := range keys {
		if _, ok := d.want.Services[k]; ok {
			owned = append(owned, k)
		}
	}
	d.mu.Unlock()
	keys = owned
	out := make(map[model.VirtualServiceKey]map[netip.AddrPort]plugin.EndpointStats, len(keys))
	var errs []error
	for _, k := range keys {
		if _, fwmark := MarkOf(k); fwmark {
			continue // not a planned key: no policy reads it
		}
		states, err := d.destinations(k)
		if err != nil {
			errs = append(errs, fmt.Errorf("ipvs: read statistics: %w", err))
			continue
		}
		m := make(map[netip.AddrPort]plugin.EndpointStats, len(states))
		for _, s := range states {
			m[netip.AddrPortFrom(s.Addr, s.Port)] = endpointStats(s)
		}
		out[k] = m
	}
	return out, errors.Join(errs...)
}

func endpointStats(s DestinationState) plugin.EndpointStats {
	return plugin.EndpointStats{
		ActiveConns:   s.ActiveConns,
		InactiveConns: s.InactiveConns,
		ConnRate:      uint32(min(s.ConnRate, math.MaxUint32)),
		BytesInRate:   s.BytesInRate,
		BytesOutRate:  s.BytesOutRate,
	}
}
