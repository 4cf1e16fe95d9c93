package plan

import (
	"slices"

	"github.com/switchyard-lb/switchyard/core/model"
)

// Arbitrate resolves the virtual services several Services ask for, as
// the Planner does incrementally: each key goes to the lowest ServiceKey
// asking for it, and leaves the others' VirtualServices for their
// Contested. Plans without a lost key are returned as they are; the
// others are copies, so the input is never modified.
func Arbitrate(plans map[model.ServiceKey]*model.ServicePlan) map[model.ServiceKey]*model.ServicePlan {
	owner := make(map[model.VirtualServiceKey]model.ServiceKey)
	for k, sp := range plans {
		for _, vs := range sp.VirtualServices {
			if o, ok := owner[vs.VirtualServiceKey]; !ok || k.Compare(o) < 0 {
				owner[vs.VirtualServiceKey] = k
			}
		}
	}
	out := make(map[model.ServiceKey]*model.ServicePlan, len(plans))
	for k, sp := range plans {
		out[k] = arbitrated(k, sp, owner)
	}
	return out
}

// arbitrated returns sp (the plan of k) without the virtual services
// owner gives to other Services, listed in Contested instead; sp itself
// when it lost none.
func arbitrated(k model.ServiceKey, sp *model.ServicePlan, owner map[model.VirtualServiceKey]model.ServiceKey) *model.ServicePlan {
	lost := 0
	for _, vs := range sp.VirtualServices {
		if owner[vs.VirtualServiceKey] != k {
			lost++
		}
	}
	if lost == 0 {
		return sp
	}
	out := *sp
	out.VirtualServices = make([]model.VirtualService, 0, len(sp.VirtualServices)-lost)
	out.Contested = make([]model.Contest, 0, lost)
	for _, vs := range sp.VirtualServices {
		if o := owner[vs.VirtualServiceKey]; o != k {
			out.Contested = append(out.Contested, model.Contest{VirtualServiceKey: vs.VirtualServiceKey, Owner: o})
			continue
		}
		out.VirtualServices = append(out.VirtualServices, vs)
	}
	return &out
}

// claims tracks which Services ask for each virtual service key, for the
// Planner: owner holds the lowest claimant of every claimed key, rivals
// every claimant, sorted, of the keys claimed more than once.
type claims struct {
	owner  map[model.VirtualServiceKey]model.ServiceKey
	rivals map[model.VirtualServiceKey][]model.ServiceKey
}

func newClaims() claims {
	return claims{
		owner:  make(map[model.VirtualServiceKey]model.ServiceKey),
		rivals: make(map[model.VirtualServiceKey][]model.ServiceKey),
	}
}

// move records that k now asks for the virtual services of next instead
// of those of prev (either may be nil; both sorted by key) and appends to
// dirty the Services whose arbitrated plan that may change: every
// claimant of a contested key that k took or let go.
func (c *claims) move(k model.ServiceKey, prev, next *model.ServicePlan, dirty []model.ServiceKey) []model.ServiceKey {
	var a, b []model.VirtualService
	if prev != nil {
		a = prev.VirtualServices
	}
	if next != nil {
		b = next.VirtualServices
	}
	for len(a) > 0 || len(b) > 0 {
		switch {
		case len(b) == 0 || len(a) > 0 && a[0].VirtualServiceKey.Compare(b[0].VirtualServiceKey) < 0:
			dirty = c.drop(k, a[0].VirtualServiceKey, dirty)
			a = a[1:]
		case len(a) == 0 || b[0].VirtualServiceKey.Compare(a[0].VirtualServiceKey) < 0:
			dirty = c.add(k, b[0].VirtualServiceKey, dirty)
			b = b[1:]
		default: // asked for before and after
			a, b = a[1:], b[1:]
		}
	}
	return dirty
}

func (c *claims) add(k model.ServiceKey, vk model.VirtualServiceKey, dirty []model.ServiceKey) []model.ServiceKey {
	o, ok := c.owner[vk]
	if !ok {
		c.owner[vk] = k
		return dirty
	}
	r := c.rivals[vk]
	if r == nil {
		r = []model.ServiceKey{o}
	}
	i, _ := slices.BinarySearchFunc(r, k, model.ServiceKey.Compare)
	r = slices.Insert(r, i, k)
	c.rivals[vk] = r
	c.owner[vk] = r[0]
	return append(dirty, r...)
}

func (c *claims) drop(k model.ServiceKey, vk model.VirtualServiceKey, dirty []model.ServiceKey) []model.ServiceKey {
	r, contested := c.rivals[vk]
	if !contested {
		delete(c.owner, vk)
		return dirty
	}
	i, _ := slices.BinarySearchFunc(r, k, model.ServiceKey.Compare) // k is a claimant
	r = slices.Delete(r, i, i+1)
	dirty = append(dirty, r...)
	c.owner[vk] = r[0]
	if len(r) == 1 {
		delete(c.rivals, vk)
	} else {
		c.rivals[vk] = r
	}
	return dirty
}
